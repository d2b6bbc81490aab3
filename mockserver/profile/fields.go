package profile

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sglmock/sglmock/compat"
)

// A profile file's fields are the Profile type's YAML fields: Fields walks
// the type, so the list cannot drift from what Parse reads, and fieldDocs
// says what each means (a test checks that every field has its text and
// every text its field).

// fieldDocs documents each field of a profile file by its YAML path.
var fieldDocs = map[string]string{
	"name":                 "the profile's name (default: the file's name without .yaml)",
	"description":          "one line on the deployment it stands for, shown by 'sglmock profiles'",
	"served_model_name":    "the model name /v1/models reports and requests name, unless --served-model-name or --model-path says otherwise",
	"context_length":       "the longest request, prompt and output, in tokens (SGLang's --context-length); a prompt may take context_length-6 tokens at most, as SGLang's scheduler allows",
	"max_total_tokens":     "the KV pool in tokens (SGLang's --max-total-tokens): what running requests and the prefix cache share; at least context_length",
	"page_size":            "the radix cache's page in tokens (SGLang's --page-size): a prefix is reused in whole pages",
	"chunked_prefill_size": "the most prompt tokens one request prefills in one iteration (SGLang's --chunked-prefill-size); -1 prefills a prompt whole; a multiple of page_size",
	"max_prefill_tokens":   "the most new tokens one prefill batch takes (SGLang's --max-prefill-tokens); at least page_size",
	"max_running_requests": "the most requests decoding at once (SGLang's --max-running-requests); more wait in the queue. Required without speculative decoding (what SGLang derives for the deployment); under it, absent means 48, as SGLang sets when the launch gives none",
	"max_output_tokens":    "the output of a chat completion without max_tokens, which a real model ends when it samples EOS; 0 or absent: 4096",
	"tp_size":              "GPUs of one tensor-parallel group (SGLang's --tp-size); with enable_dp_attention, a multiple of dp_size; 0 or absent: 1",
	"dp_size":              "DP ranks (SGLang's --dp-size), each a scheduler with its own queue, running batch, KV pool of max_total_tokens and radix cache, behind a controller that sends each request to one; 0 or absent: 1",
	"enable_dp_attention":  "DP attention (SGLang's --enable-dp-attention): the ranks share one tensor-parallel group and run every iteration together, each divides chunked_prefill_size and max_running_requests by dp_size, and admits with a token ratio scaled by 0.3",
	"load_balance_method":  "how the controller picks a rank (SGLang's --load-balance-method): auto (round_robin), round_robin, total_requests or total_tokens",
	"schedule_policy": "the order each rank admits its waiting queue in (SGLang's --schedule-policy): fcfs (the default), lpm (longest cached prefix first), " +
		"dfs-weight (by the cache's subtrees), lof (longest max_new_tokens first), random (shuffled with seed) or routing-key; lpm and dfs-weight hold back " +
		"a request whose prefix a waiting request ahead of it is about to compute",
	"enable_priority_scheduling":         "order fcfs and lof by each request's priority first, and let a request preempt running ones of lower priority (SGLang's --enable-priority-scheduling)",
	"schedule_low_priority_values_first": "with enable_priority_scheduling, lower priority values go first (SGLang's --schedule-low-priority-values-first); else higher ones",
	"disable_priority_preemption":        "with enable_priority_scheduling, never preempt a running request (SGLang's --disable-priority-preemption)",
	"priority_scheduling_preemption_threshold": "a waiting request preempts a running one only when its priority is more than this better (SGLang's " +
		"--priority-scheduling-preemption-threshold); absent: 10",
	"default_priority_value":          "with enable_priority_scheduling, the priority of a request that gives none (SGLang's --default-priority-value); absent: the lowest",
	"abort_on_priority_when_disabled": "without enable_priority_scheduling, abort a request that gives a priority with 503 (SGLang's --abort-on-priority-when-disabled)",
	"in_batch_prefix_caching_check_threshold": "lpm and dfs-weight check a waiting request against the others when its cached prefix is at most this " +
		"(SGLang's IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD); -1: no in-batch prefix caching; absent: 32",
	"in_batch_prefix_caching_deprioritize_threshold": "a checked request sharing at least this many tokens with a waiting request ahead of it goes to the back " +
		"(SGLang's IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD); absent: 32",
	"add_bos_token":  "begin every text prompt with a BOS token, as a Llama tokenizer does (prompts sent as input_ids are taken as they are)",
	"chat_template":  "the built-in chat template the built-in tokenizer renders chats with: chatml (the default), llama-3.1, kimi-k2 or kimi-k2.6 (a thinking model: the generation prompt opens <think>); a loaded tokenizer brings its own",
	"tokenizer_path": "a Hugging Face model directory whose tokenizer and chat template replace the built-in ones (--tokenizer-path overrides it); relative to the profile file",

	"prefill":             "the cost of a prefill chunk of m new tokens over p cached ones: overhead_s + per_token_s*m + attention_s*m*(p+m/2), or with table: overhead_s + table(p+m) - table(p)",
	"prefill.overhead_s":  "seconds each prefill chunk costs whatever its size",
	"prefill.per_token_s": "seconds per new prompt token",
	"prefill.attention_s": "seconds per new token per token it attends to (the quadratic term)",
	"prefill.table":       "measured cold-prefill time: [tokens, seconds] points, tokens strictly increasing, seconds not decreasing, interpolated linearly and extended with the last slope; replaces per_token_s and attention_s",

	"decode":                 "the cost of one decode round over B running requests whose contexts sum to C tokens: step_overhead_s + per_seq_s*B + per_ctx_token_s*C, or with ctx_table: step_overhead_s + per_seq_s*B + ctx_table(C)",
	"decode.step_overhead_s": "seconds each decode round costs whatever the batch",
	"decode.per_seq_s":       "seconds per running request per round",
	"decode.per_ctx_token_s": "seconds per context token (all running requests' contexts summed) per round",
	"decode.ctx_table":       "measured round time over the summed context: [tokens, seconds] points, as prefill.table; replaces per_ctx_token_s",

	"speculative":                   "speculative decoding as SGLang's --speculative-* flags set it; absent: none. Each round a request gains 1 to num_steps+1 tokens",
	"speculative.algorithm":         "SGLang's --speculative-algorithm: " + strings.Join(Algorithms, ", ") + "; EAGLE, EAGLE3, NEXTN and FROZEN_KV_MTP key the radix cache on bigrams, as SGLang does",
	"speculative.num_steps":         "draft depth (SGLang's --speculative-num-steps), 1 to 64",
	"speculative.eagle_topk":        "draft branching (SGLang's --speculative-eagle-topk)",
	"speculative.num_draft_tokens":  "tokens verified per round (SGLang's --speculative-num-draft-tokens); num_steps+1 when eagle_topk is 1",
	"speculative.accept_probs":      "num_steps probabilities: draft i is accepted with accept_probs[i] given every earlier one was; the target model adds one token",
	"speculative.round_cost_factor": "a draft+verify round costs this many plain decode rounds",

	"hicache":                              "SGLang's hierarchical cache (HiCache): a host tier under the radix cache and an optional storage tier, with the --hicache-* flags and what their transfers cost; absent: none",
	"hicache.enable":                       "run HiCache (SGLang's --enable-hierarchical-cache); false keeps the costs for the flag to switch it on",
	"hicache.ratio":                        "the host pool as a multiple of max_total_tokens (SGLang's --hicache-ratio, default 2.0); must come out larger than the device pool",
	"hicache.size_gb":                      "the host pool in GB of KV (SGLang's --hicache-size); 0: ratio decides",
	"hicache.write_policy":                 "when a node is backed up to the host (SGLang's --hicache-write-policy): write_through (first insertion, the default), write_through_selective (second), write_back (on eviction)",
	"hicache.io_backend":                   "SGLang's --hicache-io-backend: kernel (default), direct or kernel_ascend; normalized with mem_layout as SGLang does, reported by /server_info",
	"hicache.mem_layout":                   "SGLang's --hicache-mem-layout: layer_first (default), page_first, page_first_direct, page_first_kv_split, page_head",
	"hicache.storage_backend":              "the storage tier (SGLang's --hicache-storage-backend): file (a directory of page files), memory (the mock's in-process store), or a distributed backend's name (mooncake, hf3fs, nixl, aibrix, dynamic, eic, simm), which the in-process store stands in for; empty: none",
	"hicache.storage_prefetch_policy":      "when a prefetch from storage stops (SGLang's --hicache-storage-prefetch-policy): timeout (the default; best_effort in a release before 0.5.12), wait_complete or best_effort",
	"hicache.storage_backend_extra_config": "SGLang's --hicache-storage-backend-extra-config: JSON, or @FILE (.json, .yaml); prefetch_threshold (256 tokens), prefetch_timeout_base (2 s), prefetch_timeout_per_ki_token (0.1 s), prefetch_timeout_max (30 s) act; before SGLang 0.5.12 the timeout defaults to 1 s plus 0.25 s per 1024 tokens and prefetch_timeout_max is the backend's",
	"hicache.kv":                           "the model's KV cache per token: layers x kv_heads x head_dim x 2 x dtype_bytes, or with mla_dim layers x mla_dim x dtype_bytes",
	"hicache.kv.layers":                    "the model's layers: a load back overlaps them one by one with the prefill",
	"hicache.kv.kv_heads":                  "KV heads (per rank) of an MHA/GQA model",
	"hicache.kv.head_dim":                  "head dimension of an MHA/GQA model",
	"hicache.kv.dtype_bytes":               "bytes per KV element (2 for bf16, 1 for fp8)",
	"hicache.kv.mla_dim":                   "kv_lora_rank + qk_rope_head_dim of an MLA model (DeepSeek, Kimi); set, it replaces kv_heads and head_dim",
	"hicache.host_gbps":                    "device-host bandwidth each way in GB/s (1e9 bytes): backups to the host and load backs",
	"hicache.transfer_overhead_s":          "seconds each device-host transfer costs besides its bytes",
	"hicache.storage_read_gbps":            "the storage backend's read bandwidth in GB/s: prefetches",
	"hicache.storage_write_gbps":           "the storage backend's write bandwidth in GB/s: backups to storage",
	"hicache.storage_page_overhead_s":      "seconds each page read from or written to storage costs besides its bytes",

	"flush_busy_after_finish_s": "simulated seconds the server stays busy for /flush_cache after an iteration that finished a request, as SGLang's overlap scheduler does; 0: idle at once",
	"sglang_version":            "the SGLang release whose rules the deployment follows (sglmock version lists them; --sglang-version overrides it); absent: " + compat.Default,
	"seed":                      "seeds the speculative acceptance draws (with each request's rid) and the cost jitter: the same seed gives the same timings",
	"jitter":                    "relative standard deviation of seeded noise on each iteration's cost, in [0, 1); 0: exact",

	"calibration":                   "what 'sglmock calibrate' measured the costs on (it writes this; the engine does not read it): a prompt past max_prompt_tokens is an extrapolation, and 'bench --dry-run' says so",
	"calibration.min_prompt_tokens": "the shortest prompt measured",
	"calibration.max_prompt_tokens": "the longest prompt measured",
	"calibration.accuracy":          "the largest relative error of a measured time predicted by a fit without its prompt size (leave-one-out); absent when the rows were too few to tell",
}

// FieldDoc is one field of a profile file.
type FieldDoc struct {
	Path string // YAML path: "decode.ctx_table"
	Type string // what the YAML value is: "integer", "seconds", ...
	Doc  string
}

// Fields documents every field of a profile file, in the Profile type's
// order; a mapping comes before its fields.
func Fields() []FieldDoc {
	var out []FieldDoc
	walkFields(reflect.TypeFor[Profile](), "", func(path string, t reflect.Type) {
		out = append(out, FieldDoc{Path: path, Type: yamlTypeName(path, t), Doc: fieldDocs[path]})
	})
	return out
}

// walkFields calls visit for every YAML field of the struct type t and,
// depth first, of the structs it holds.
func walkFields(t reflect.Type, prefix string, visit func(path string, t reflect.Type)) {
	for _, name := range yamlFieldNames(t) {
		sf := yamlField(t, name)
		path := prefix + name
		visit(path, sf.Type)
		if st := structOf(sf.Type); st != nil {
			walkFields(st, path+".", visit)
		}
	}
}

// structOf is the struct type t is or points to; nil for any other type.
func structOf(t reflect.Type) reflect.Type {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Struct {
		return t
	}
	return nil
}

// yamlFieldNames lists the YAML names of a struct type's fields, in order.
func yamlFieldNames(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}

func yamlField(t reflect.Type, name string) reflect.StructField {
	for i := range t.NumField() {
		if n, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); n == name {
			return t.Field(i)
		}
	}
	panic("no YAML field " + name)
}

// yamlTypeName says what a field's YAML value is.
func yamlTypeName(path string, t reflect.Type) string {
	optional := ""
	if t.Kind() == reflect.Pointer {
		t, optional = t.Elem(), ", optional"
	}
	switch {
	case t == reflect.TypeFor[Table]():
		return "list of [tokens, seconds]"
	case t.Kind() == reflect.Struct:
		return "mapping" + optional
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Float64:
		return "list of numbers"
	case t.Kind() == reflect.Float64 && strings.HasSuffix(path, "_s"):
		return "seconds"
	case t.Kind() == reflect.Float64:
		return "number"
	case t.Kind() == reflect.Int, t.Kind() == reflect.Uint64:
		return "integer"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() == reflect.String:
		return "text"
	}
	return t.String()
}

// KeyError is a key of a profile's YAML that is not a field, or a value
// that is not of its field's kind, at its line.
type KeyError struct {
	Line  int
	Field string // its YAML path: "decode.warp"
	Msg   string
}

func (e *KeyError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return fmt.Sprintf("line %d: %s: %s", e.Line, e.Field, e.Msg)
}

// CheckKeys checks a profile's YAML mapping against the Profile type:
// every key must be a field, named with the fields it could have been,
// and every value must decode into its field's type. It checks the keys
// that are there; a partial profile (merged over a built-in) passes.
func CheckKeys(n *yaml.Node) error {
	return checkKeys(n, reflect.TypeFor[Profile](), "")
}

func checkKeys(n *yaml.Node, t reflect.Type, path string) error {
	st := structOf(t)
	if st == nil {
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			return &KeyError{Line: n.Line, Field: path, Msg: fmt.Sprintf("want %s, got %s", yamlTypeName(path, t), NodeKind(n))}
		}
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return &KeyError{Line: n.Line, Field: path, Msg: fmt.Sprintf("want a mapping, got %s", NodeKind(n))}
	}
	names := yamlFieldNames(st)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		field := k.Value
		if path != "" {
			field = path + "." + k.Value
		}
		if !slices.Contains(names, k.Value) {
			return &KeyError{Line: k.Line, Field: field,
				Msg: fmt.Sprintf("unknown profile key (want one of %s)", strings.Join(names, ", "))}
		}
		if err := checkKeys(v, yamlField(st, k.Value).Type, field); err != nil {
			return err
		}
	}
	return nil
}

// NodeKind names what a YAML node is, for an error: "a mapping", "a
// list", a scalar's value quoted, "an alias". Scenario files say it too.
func NodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "nothing"
}
