package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// The llm-d router's configuration schema (llm-d-router v0.10.0), written
// from its source because its module is not served by the Go module
// proxy: apix/config/v1alpha1 (EndpointPickerConfig), and each plugin's
// parameter type (the factories under pkg/epp/framework/plugins). The
// router decodes the config with Kubernetes' strict decoder and each
// plugin's parameters with a json.Decoder that disallows unknown fields,
// so a key that is not here fails, as it fails at the router's start.
// Decoding here is stricter still in two ways the fleet never needs:
// keys match case-sensitively, and plugins whose parameters the router
// ignores take none.
//
// Beyond the keys, checkRouterConfig checks what the router would warn
// about or what would quietly not work: deprecated forms, references to
// plugins that are not defined, the sglang metric mapping (an extract
// error on every scrape otherwise), and the wiring of the KV events
// subscriber for the mode in use.

type eppConfig struct {
	APIVersion         string         `yaml:"apiVersion"`
	Kind               string         `yaml:"kind"`
	FeatureGates       []string       `yaml:"featureGates"`
	Plugins            []eppPlugin    `yaml:"plugins"`
	SchedulingProfiles []eppProfile   `yaml:"schedulingProfiles"`
	DataLayer          *eppDataLayer  `yaml:"dataLayer"`
	FlowControl        *yaml.Node     `yaml:"flowControl"`    // not used by the fleet: any value
	RequestHandler     *yaml.Node     `yaml:"requestHandler"` // idem
	Unused             map[string]any `yaml:",inline"`        // saturationDetector and parser: deprecated
}

type eppPlugin struct {
	Name       string    `yaml:"name"`
	Type       string    `yaml:"type"`
	Parameters yaml.Node `yaml:"parameters"`
}

type eppProfile struct {
	Name    string `yaml:"name"`
	Plugins []struct {
		PluginRef string   `yaml:"pluginRef"`
		Weight    *float64 `yaml:"weight"`
	} `yaml:"plugins"`
}

type eppRef struct {
	PluginRef string `yaml:"pluginRef"`
}

type eppDataLayer struct {
	InjectDefaults *bool `yaml:"injectDefaults"`
	Sources        []struct {
		PluginRef  string   `yaml:"pluginRef"`
		Extractors []eppRef `yaml:"extractors"`
	} `yaml:"sources"`
	Discovery                   *eppRef `yaml:"discovery"`
	CrossReplicaSyncerPluginRef string  `yaml:"crossReplicaSyncerPluginRef"`
	CrossReplicaSyncInterval    string  `yaml:"crossReplicaSyncInterval"`
}

// Plugin parameters, by plugin type.

type fileDiscoveryParameters struct {
	Path      string `yaml:"path"`
	WatchFile bool   `yaml:"watchFile"`
}

type tokenProducerParameters struct {
	UDSTokenizerConfig *yaml.Node `yaml:"udsTokenizerConfig"` // deprecated backend
	VLLM               *struct {
		URL       string `yaml:"url"`
		Timeout   string `yaml:"timeout"`
		MMTimeout string `yaml:"mmTimeout"`
	} `yaml:"vllm"`
	Estimate  *yaml.Node `yaml:"estimate"`
	ModelName string     `yaml:"modelName"`
}

type preciseProducerParameters struct {
	TokenProcessorConfig *struct {
		BlockSize       *int   `yaml:"blockSize"` // deprecated
		BlockSizeTokens int    `yaml:"blockSizeTokens"`
		HashSeed        string `yaml:"hashSeed"`
	} `yaml:"tokenProcessorConfig"`
	IndexerConfig *struct {
		KVBlockIndexConfig *struct {
			InMemoryConfig         *yaml.Node `yaml:"inMemoryConfig"`
			RedisConfig            *yaml.Node `yaml:"redisConfig"`
			CostAwareMemoryConfig  *yaml.Node `yaml:"costAwareMemoryConfig"`
			EnableMetrics          bool       `yaml:"enableMetrics"`
			MetricsLoggingInterval *yaml.Node `yaml:"metricsLoggingInterval"`
		} `yaml:"kvBlockIndexConfig"`
		KVCacheBackendConfigs *yaml.Node `yaml:"kvCacheBackendConfigs"`
		TokenizersPoolConfig  *yaml.Node `yaml:"tokenizersPoolConfig"` // refused by the producer
	} `yaml:"indexerConfig"`
	KVEventsConfig *struct {
		ZMQEndpoint        string `yaml:"zmqEndpoint"`
		TopicFilter        string `yaml:"topicFilter"`
		Concurrency        int    `yaml:"concurrency"`
		EngineType         string `yaml:"engineType"`
		DiscoverPods       *bool  `yaml:"discoverPods"` // the router's default is true
		PodDiscoveryConfig *struct {
			PodLabelSelector string `yaml:"podLabelSelector"`
			PodNamespace     string `yaml:"podNamespace"`
			SocketPort       int    `yaml:"socketPort"`
			ReplaySocketPort int    `yaml:"replaySocketPort"`
		} `yaml:"podDiscoveryConfig"`
	} `yaml:"kvEventsConfig"`
	SpeculativeIndexing bool   `yaml:"speculativeIndexing"`
	SpeculativeTTL      string `yaml:"speculativeTTL"`
}

type prefixScorerParameters struct {
	PrefixMatchInfoProducerName string  `yaml:"prefixMatchInfoProducerName"`
	MatchLengthWeight           float64 `yaml:"matchLengthWeight"`
	MatchLengthScaleTokens      int     `yaml:"matchLengthScaleTokens"`
}

type maxScorePickerParameters struct {
	MaxNumOfEndpoints int `yaml:"maxNumOfEndpoints"`
}

type metricsSourceParameters struct {
	Scheme             string `yaml:"scheme"`
	Path               string `yaml:"path"`
	Port               *int   `yaml:"port"`
	InsecureSkipVerify bool   `yaml:"insecureSkipVerify"`
	CACertPath         string `yaml:"caCertPath"`
	ClientCertPath     string `yaml:"clientCertPath"`
	ClientKeyPath      string `yaml:"clientKeyPath"`
	Interval           string `yaml:"interval"`
}

type metricsExtractorParameters struct {
	EngineLabelKey string `yaml:"engineLabelKey"`
	DefaultEngine  string `yaml:"defaultEngine"`
	EngineConfigs  []struct {
		Name                    string     `yaml:"name"`
		QueuedRequestsSpec      string     `yaml:"queuedRequestsSpec"`
		RunningRequestsSpec     string     `yaml:"runningRequestsSpec"`
		KVUsageSpec             string     `yaml:"kvUsageSpec"`
		LoRASpec                string     `yaml:"loraSpec"`
		CacheInfoSpec           *string    `yaml:"cacheInfoSpec"`
		CacheBlockSizeLabelName string     `yaml:"cacheBlockSizeLabelName"`
		CacheNumBlocksLabelName string     `yaml:"cacheNumBlocksLabelName"`
		CacheBlockSizeSpec      string     `yaml:"cacheBlockSizeSpec"`
		CacheNumBlocksSpec      string     `yaml:"cacheNumBlocksSpec"`
		CustomMetrics           *yaml.Node `yaml:"customMetrics"`
	} `yaml:"engineConfigs"`
}

// pluginParameters makes the parameter value of each plugin type the
// schema knows; nil: the router ignores its parameters (none allowed).
var pluginParameters = map[string]func() any{
	"file-discovery":                func() any { return new(fileDiscoveryParameters) },
	"token-producer":                func() any { return new(tokenProducerParameters) },
	"precise-prefix-cache-producer": func() any { return new(preciseProducerParameters) },
	"prefix-cache-scorer":           func() any { return new(prefixScorerParameters) },
	"queue-scorer":                  nil,
	"kv-cache-utilization-scorer":   nil,
	"max-score-picker":              func() any { return new(maxScorePickerParameters) },
	"single-profile-handler":        nil,
	"metrics-data-source":           func() any { return new(metricsSourceParameters) },
	"core-metrics-extractor":        func() any { return new(metricsExtractorParameters) },
	"endpoint-notification-source":  nil,
}

// deprecatedPluginTypes are types the router v0.10 still loads with a
// deprecation warning, and what replaces each.
var deprecatedPluginTypes = map[string]string{
	"precise-prefix-cache-scorer": "precise-prefix-cache-producer and prefix-cache-scorer (prefixMatchInfoProducerName)",
	"tokenizer":                   "token-producer",
}

// strictDecode decodes b into v, failing on a key v does not have.
func strictDecode(b []byte, v any) error {
	d := yaml.NewDecoder(bytes.NewReader(b))
	d.KnownFields(true)
	return d.Decode(v)
}

// decodeParameters decodes a plugin's parameters strictly into its type.
func decodeParameters(p eppPlugin) (any, error) {
	newParams, known := pluginParameters[p.Type]
	if !known {
		if repl, ok := deprecatedPluginTypes[p.Type]; ok {
			return nil, fmt.Errorf("plugin %s: type %s is deprecated (use %s)", p.Name, p.Type, repl)
		}
		return nil, fmt.Errorf("plugin %s: type %s is not in this schema", p.Name, p.Type)
	}
	if p.Parameters.Kind == 0 {
		if newParams == nil {
			return nil, nil
		}
		return newParams(), nil
	}
	if newParams == nil {
		return nil, fmt.Errorf("plugin %s: type %s takes no parameters", p.Name, p.Type)
	}
	b, err := yaml.Marshal(&p.Parameters)
	if err != nil {
		return nil, err
	}
	v := newParams()
	if err := strictDecode(b, v); err != nil {
		return nil, fmt.Errorf("plugin %s: parameters: %w", p.Name, err)
	}
	return v, nil
}

// checkRouterConfig decodes an EndpointPickerConfig strictly and checks
// that the router starts on it with no deprecation warning and no
// extract error, with its KV events subscriber wired for the mode used:
// file discovery and one central endpoint the router binds, or
// Kubernetes discovery and a subscriber per pod.
func checkRouterConfig(b []byte) error {
	var cfg eppConfig
	if err := strictDecode(b, &cfg); err != nil {
		return err
	}
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch {
	case cfg.APIVersion == "inference.networking.x-k8s.io/v1alpha1":
		fail("apiVersion %s is deprecated (use %s)", cfg.APIVersion, RouterAPIVersion)
	case cfg.APIVersion != RouterAPIVersion:
		fail("apiVersion %q: want %s", cfg.APIVersion, RouterAPIVersion)
	}
	if cfg.Kind != "EndpointPickerConfig" {
		fail("kind %q: want EndpointPickerConfig", cfg.Kind)
	}
	for k := range cfg.Unused {
		fail("%s: deprecated or unknown top-level key", k)
	}
	byName := map[string]eppPlugin{}
	params := map[string]any{}
	for _, p := range cfg.Plugins {
		if p.Type == "" {
			fail("plugin %q has no type", p.Name)
			continue
		}
		if p.Name == "" {
			p.Name = p.Type // the router's rule
		}
		if _, dup := byName[p.Name]; dup {
			fail("duplicate plugin name %s", p.Name)
		}
		byName[p.Name] = p
		v, err := decodeParameters(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		params[p.Name] = v
	}
	ref := func(where, name string, types ...string) {
		p, ok := byName[name]
		switch {
		case !ok:
			fail("%s: no plugin named %q", where, name)
		case len(types) > 0 && !slices.Contains(types, p.Type):
			fail("%s: plugin %s is a %s, want %v", where, name, p.Type, types)
		}
	}
	if len(cfg.SchedulingProfiles) == 0 {
		fail("no scheduling profile")
	}
	for _, sp := range cfg.SchedulingProfiles {
		for _, pr := range sp.Plugins {
			ref("schedulingProfiles["+sp.Name+"]", pr.PluginRef)
		}
	}
	// The data layer: which extractors each source feeds.
	injectDefaults := true
	fedBy := map[string][]string{} // extractor -> source types
	if dl := cfg.DataLayer; dl != nil {
		if dl.InjectDefaults != nil {
			injectDefaults = *dl.InjectDefaults
		}
		if dl.Discovery != nil {
			ref("dataLayer.discovery", dl.Discovery.PluginRef, "file-discovery")
		}
		for _, s := range dl.Sources {
			ref("dataLayer.sources", s.PluginRef)
			for _, e := range s.Extractors {
				ref("dataLayer.sources["+s.PluginRef+"].extractors", e.PluginRef)
				fedBy[e.PluginRef] = append(fedBy[e.PluginRef], byName[s.PluginRef].Type)
			}
		}
	}
	fileMode := cfg.DataLayer != nil && cfg.DataLayer.Discovery != nil
	if injectDefaults {
		fail("dataLayer.injectDefaults is not false: the loader adds its default metrics source, whose sglang mapping reads " +
			"sglang:cache_config_info, which SGLang does not export (an extract error on every scrape)")
	}
	sglangMapped := false
	for name, v := range params {
		switch p := v.(type) {
		case *tokenProducerParameters:
			if p.VLLM == nil || p.VLLM.URL == "" || p.ModelName == "" {
				fail("plugin %s: the replicas render prompts: give modelName and vllm.url", name)
			}
		case *preciseProducerParameters:
			checkPreciseProducer(name, p, fileMode, fedBy[name], fail)
		case *prefixScorerParameters:
			ref("plugin "+name+": prefixMatchInfoProducerName", p.PrefixMatchInfoProducerName, "precise-prefix-cache-producer")
		case *metricsExtractorParameters:
			if !slices.Contains(fedBy[name], "metrics-data-source") {
				fail("plugin %s: no metrics-data-source feeds it (dataLayer.sources)", name)
			}
			for _, ec := range p.EngineConfigs {
				if ec.Name != EngineType {
					continue
				}
				sglangMapped = true
				if ec.CacheInfoSpec == nil || *ec.CacheInfoSpec != "" {
					fail(`plugin %s: the sglang mapping needs cacheInfoSpec: "" (SGLang exports no sglang:cache_config_info)`, name)
				}
				if ec.QueuedRequestsSpec == "" || ec.RunningRequestsSpec == "" || ec.KVUsageSpec == "" {
					fail("plugin %s: the sglang mapping needs the queue, running and KV usage series", name)
				}
			}
		}
	}
	if !sglangMapped {
		fail("no core-metrics-extractor maps the sglang engine type")
	}
	return errors.Join(errs...)
}

// checkPreciseProducer checks the KV events subscriber's wiring: in file
// mode one central endpoint the router binds, discoverPods false; with
// Kubernetes discovery a subscriber per pod, which the producer makes
// only as an extractor of an endpoint-notification-source.
func checkPreciseProducer(name string, p *preciseProducerParameters, fileMode bool, fedBy []string, fail func(string, ...any)) {
	if tp := p.TokenProcessorConfig; tp == nil || tp.BlockSizeTokens < 1 {
		fail("plugin %s: tokenProcessorConfig.blockSizeTokens must be the replicas' page size", name)
	} else if tp.BlockSize != nil {
		fail("plugin %s: tokenProcessorConfig.blockSize is deprecated (use blockSizeTokens)", name)
	}
	if p.IndexerConfig != nil && p.IndexerConfig.TokenizersPoolConfig != nil {
		fail("plugin %s: indexerConfig.tokenizersPoolConfig is refused (the token-producer tokenizes)", name)
	}
	ev := p.KVEventsConfig
	if ev == nil || ev.EngineType != EngineType || ev.TopicFilter != TopicFilter {
		fail("plugin %s: kvEventsConfig needs engineType %s and topicFilter %s (the router's defaults are vllm's)", name, EngineType, TopicFilter)
		return
	}
	discoverPods := ev.DiscoverPods == nil || *ev.DiscoverPods
	switch {
	case fileMode && discoverPods:
		fail("plugin %s: file discovery with discoverPods true: no pod is ever discovered (set discoverPods: false and zmqEndpoint)", name)
	case fileMode && ev.ZMQEndpoint == "":
		fail("plugin %s: file discovery needs kvEventsConfig.zmqEndpoint, the endpoint the router binds", name)
	case !fileMode && discoverPods && !slices.Contains(fedBy, "endpoint-notification-source"):
		fail("plugin %s: discoverPods true, but no endpoint-notification-source feeds it (dataLayer.sources): no pod's events are subscribed", name)
	case !fileMode && discoverPods && (ev.PodDiscoveryConfig == nil || ev.PodDiscoveryConfig.SocketPort < 1):
		fail("plugin %s: discoverPods true needs podDiscoveryConfig.socketPort, the port each pod binds", name)
	}
}

// checkEndpoints decodes an endpoints file strictly as the router's file
// discovery reads it: each address an IPv4 literal, each port a string.
func checkEndpoints(b []byte) error {
	var f struct {
		Endpoints []struct {
			Name      string            `yaml:"name"`
			Namespace string            `yaml:"namespace"`
			Address   string            `yaml:"address"`
			Port      string            `yaml:"port"`
			Labels    map[string]string `yaml:"labels"`
		} `yaml:"endpoints"`
	}
	if err := strictDecode(b, &f); err != nil {
		return err
	}
	if len(f.Endpoints) == 0 {
		return errors.New("no endpoints")
	}
	for _, e := range f.Endpoints {
		ip := net.ParseIP(e.Address)
		port, err := strconv.Atoi(e.Port)
		if e.Name == "" || ip == nil || ip.To4() == nil || err != nil || port < 1 || port > 65535 {
			return fmt.Errorf("endpoint %+v: want a name, an IPv4 address and a port 1..65535", e)
		}
		if e.Labels["llm-d.ai/engine-type"] != EngineType {
			return fmt.Errorf("endpoint %s: label llm-d.ai/engine-type %q, want %s (it selects the sglang metric mapping)", e.Name, e.Labels["llm-d.ai/engine-type"], EngineType)
		}
	}
	return nil
}
