// Package fleet lays out N sglmock replicas on one machine for a
// cache-aware router, and reads them back: what `sglmock fleet` runs.
//
// # Layout
//
// Each replica is a whole server (its own engine, radix cache and KV event
// publisher) on its own address. With LayoutAddresses replica i listens on
// 127.0.0.(i+1) at the base port, as N hosts would, which the llm-d router
// needs when it names replicas by IP (Linux routes all of 127.0.0.0/8 to
// loopback); with LayoutPorts every replica shares 127.0.0.1 and replica i
// takes the base port + i.
//
// # KV events
//
// By default every replica connects its PUB socket to one endpoint the
// router binds (RouterKVEndpoint, tcp://127.0.0.1:5557), each under its own
// topic kv@<address>:<port>@<model> (Topic), set explicitly on every
// replica: the router tells replicas apart by topic, as the llm-d router's
// precise prefix-cache producer does in its central mode. A config whose
// endpoint binds ("*" in it) is refused: the router would have to connect
// to every replica. A replay endpoint, which each replica binds, gets its
// port offset by the replica's index, as SGLang offsets data-parallel
// ranks. Listen binds every replica's HTTP address before any replica
// starts, so a port clash fails the whole fleet at once.
//
// # Files for the router
//
// EndpointsYAML is the llm-d router's file-discovery format (endpoints with
// a name, an IPv4 address, a port as a string and labels, among them
// llm-d.ai/engine-type: sglang, which selects the sglang metric mapping).
// RouterConfig is an EndpointPickerConfig that the router v0.10 loads
// unchanged, with no deprecation warning and no metric extract error: the
// file-discovery plugin watching that file; the token-producer rendering
// prompts through a replica's vLLM-style render endpoint (vllm.url); the
// precise-prefix-cache-producer indexing the KV events (engine type
// sglang, blockSizeTokens the replicas' page size) for the
// prefix-cache-scorer; the queue and KV-utilization scorers; and an
// explicit sglang metric mapping (SGLangMetrics) without the
// sglang:cache_config_info series SGLang does not export, with the
// loader's default metrics source turned off (injectDefaults: false) so it
// does not bring that series back. RouterCommand is the command line that
// starts the router on it. The schema test (routerschema_test.go) decodes
// both files strictly against the router's types, written from its source.
//
// # Status
//
// Status asks each replica's /sim/stats for its load, cache size and hit
// rate.
package fleet
