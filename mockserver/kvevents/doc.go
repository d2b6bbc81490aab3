// Package kvevents publishes the radix cache's KV events as SGLang does
// with --kv-events-config: a ZMQ PUB socket (pure Go, go-zeromq/zmq4)
// sends msgpack batches that a cache-aware router, such as the llm-d
// router's precise prefix-cache scorer, replays to know which blocks each
// replica holds.
//
// # The wire, as SGLang's
//
// Each message is three frames: the topic, the batch's sequence number as
// 8 bytes big-endian (0, 1, 2, ... per publisher), and the msgpack payload
// [ts, [event...], dp_rank] (KVEventBatch, encoded as msgspec encodes
// array_like structs; see Batch.Encode). Events are coalesced as SGLang
// coalesces them since PR #31479 (KVCacheEventRecorder.enqueue): a radix
// node's pages are one event, a store whose first page hangs from the last
// page of the store just before it (pages of the same size) extends that
// event, and removals in a row are one event. A server that follows an
// older release (compat.Rules) sends what it sent: 0.5.17, one
// BlockRemoved per removed node (PR #29265) and one BlockStored per page;
// 0.5.12 and older, one event per page, stored or removed:
//
//	["BlockStored", [hash...], parent_hash | nil, [token...], block_size, nil, "GPU"]
//	["BlockRemoved", [hash...], "GPU"]
//	["AllBlocksCleared"]
//
// A page's hash is SGLang's: SHA-256 over the previous page's digest on
// the path (none for a page at the root) and the page's token ids as 4-byte
// little-endian integers, its first 64 bits read as a signed int64
// (radixcache.Digest). Under bigram keys (EAGLE-family speculative
// decoding) a page's tokens are its bigrams, sent as [first, second] pairs,
// as SGLang sends its tuples. The radix tree announces a page after the
// page it hangs from, and removes pages exactly as it evicts leaves,
// children first. AllBlocksCleared comes when the tree starts empty and
// after every successful flush.
//
// With HiCache (a radix tree with a host tier) the medium says which tier a
// page reached or left, as HiRadixCache records it since PR #22894 (0.5.11,
// the host-kv-events rule): "GPU" for the device (an insertion, a device
// eviction, a load back), "CPU_PINNED" for the host pool (a
// write-through's copy once written, a prefetch's pages, a host eviction).
// The storage tier sends nothing: HiRadixCache records no event for its
// backups to storage. Coalescing joins events on one medium only. 0.5.10
// and 0.5.10.post1 tell only the device's tree: a node's insertion and its
// leaving the tree, both "GPU", even when it leaves from the host; the host
// copies, device evictions to the host, load backs and prefetches send
// nothing (radixcache.HostTier.UntieredEvents).
//
// # Salted requests: the form the llm-d router decodes
//
// Since PR #30827 SGLang seeds the hash chain of a request with a
// cache_salt with SHA-256("sglang-cache-salt-v1\0" + salt) and appends an
// eighth field, the map {"cache_salt": salt}, to its BlockStored events
// (BlockStoredWithMetadata). The llm-d router v0.10.0 cannot decode that:
// its SGLang adapter (kvevents/engineadapter/sglang_adapter.go,
// convertBlockStoredEvent) reads the eighth field as lora_name, a string,
// and a map there fails msgpack decoding, so the router drops the whole
// batch, the unsalted events in it included. The mock therefore keeps the
// form the router decodes, the one before PR #30827: a salted request's
// pages carry the unsalted hash chain and seven fields, as every other
// page's do. Hashes depend on the tokens alone, not on the cache
// namespace: two replicas holding the same prefix announce the same
// hashes, whatever their requests' extra_key or cache_salt.
//
// # When batches go out
//
// The engine gathers events as its cache changes and publishes them at
// SGLang's points: each prefill batch, each decode-log interval, and when
// the scheduler goes idle (engine.CacheEvents). The publisher's goroutine
// encodes and sends; the engine never waits for it: a full queue (in
// batches, max_queue_size, or in bytes, MaxQueueBytes) drops the batch,
// where SGLang's scheduler would block (see Publisher).
//
// # Sockets
//
// Config is SGLang's KVEventsConfig with its JSON keys and defaults. With
// "*", "::" or "0.0.0.0" as the host (or an ipc:// endpoint) the replica
// binds and the router connects to it; otherwise the replica connects to
// a router that binds, retrying every 100 ms until the router is up and
// reconnecting when it comes back. The mock's own "bind" key overrides
// that rule: {"endpoint": "tcp://127.0.0.1:5557", "bind": true} listens
// on loopback only, which SGLang cannot express. A socket bound on every
// interface is logged as a warning, since BlockStored carries the prompts'
// token ids. An ipc:// socket file left by a killed process is removed
// before binding, as libzmq's bind does. A deployment of several DP
// ranks runs a publisher a rank, each on the endpoint offset as SGLang's
// offset_endpoint_port offsets it (Config.ForRank: a TCP port plus the
// attention-DP rank), its batches carrying that rank. The topic defaults to
// SGLang's, the empty topic, so a router tells replicas apart only by a
// topic the operator sets; sglmock fleet sets kv@<host>:<port>@<served
// model name>, the llm-d router's convention, on every replica
// (RouterTopic).
//
// The sockets are the package's own ZMTP 3.0 implementation (zmtp.go,
// NULL mechanism), which libzmq and go-zeromq subscribers talk to (the
// tests run both), so that every peer costs a bounded amount:
//
//   - PUB (pubsock.go): each subscriber has its own queue, bounded by the
//     high-water mark in messages and by 16 MiB, and its own writer, so a
//     subscriber that reads slowly or not at all loses messages of its own
//     (as libzmq drops at a pipe's high-water mark) and never holds up the
//     others; one whose writes make no progress for 30 s is disconnected.
//     Peers are admitted as libzmq admits them, which caps neither, while
//     what they hold stays bounded: at most 32 handshakes are in progress,
//     counted from a connection's first byte, each for at most 3 s, and a
//     new connection that finds 32 ends the oldest; at most 1024
//     subscribers are established, and a new one that finds them all ends
//     the oldest that was never sent a message (refused only when every
//     one was). So neither silent connections nor idle subscribers lock a
//     real subscriber out. A subscriber holds at most 256 prefixes and 64
//     KiB of them; one that subscribes past that is disconnected. Messages
//     are encoded once and shared, and a subscriber's queued ones go out
//     together, in writev calls.
//   - The replay ROUTER (replay.go) resends the last buffer_steps messages
//     (and at most MaxReplayBytes of them) from a requested sequence
//     number, then the end marker -1, as SGLang's _service_replay. Each
//     client is served on its own goroutine, at most 16 at once: a new one
//     that finds 16 ends the one idle longest (refused only when all 16 are
//     being answered), and one that asks nothing for 10 s is disconnected;
//     a reply that makes no progress for 10 s disconnects its client, and
//     the warning for malformed requests is written at most once a second.
//   - Every size a peer sends is bounded before it sizes a buffer, and the
//     handshake has a 3 s deadline.
//
// Stats counts the drops and the cuts; /sim/stats and /metrics report
// them. Subscribe and RequestReplay are go-zeromq clients, for tests and
// tools.
package kvevents
