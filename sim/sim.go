package sim

import "encoding/json"

// Profile is GET /sim/profile.
type Profile struct {
	Name              string  `json:"name"`
	Speedup           float64 `json:"speedup"`
	DisableRadixCache bool    `json:"disable_radix_cache"`
	// ExpectedAccept is the mean tokens a decode round gives a request
	// (1 without speculative decoding).
	ExpectedAccept float64 `json:"expected_accept"`
	// AcceptDist is the distribution of the tokens a decode round gives a
	// request: AcceptDist[i] is the probability of i+1 tokens (i drafts
	// accepted, and the target model's own). [1] without speculative
	// decoding.
	AcceptDist []float64 `json:"accept_dist"`
	// Profile is the whole profile, with the keys of its YAML file.
	Profile json.RawMessage `json:"profile"`
}

// Expectation is GET /sim/expect?prompt_tokens=N&cached_tokens=C&completion_tokens=K:
// what the cost model predicts for one request alone on an idle server.
type Expectation struct {
	PromptTokens     int     `json:"prompt_tokens"`
	CachedTokens     int     `json:"cached_tokens"`
	CompletionTokens int     `json:"completion_tokens"`
	TTFT             float64 `json:"ttft_s"`
	// Decode is the expected time of the tokens after the first.
	Decode       float64 `json:"decode_s"`
	DecodeRounds float64 `json:"decode_rounds"`
	E2E          float64 `json:"e2e_s"`
	// DecodeTokensPerS is the steady-state decode rate at this context;
	// null when the profile charges nothing for a round.
	DecodeTokensPerS *float64 `json:"decode_tokens_per_s"`
	// PrefillTokensPerS is the computed prompt tokens over TTFT; null when
	// the profile charges nothing for prefill.
	PrefillTokensPerS *float64 `json:"prefill_tokens_per_s"`
	ExpectedAccept    float64  `json:"expected_accept_len"`
}

// RequestSummary is one entry of GET /sim/requests.
type RequestSummary struct {
	RID              string  `json:"rid"`
	PromptTokens     int     `json:"prompt_tokens"`
	CachedTokens     int     `json:"cached_tokens"`
	CompletionTokens int     `json:"completion_tokens"`
	ReusedFrom       string  `json:"reused_from"`
	Arrival          float64 `json:"arrival_s"`
	Finished         float64 `json:"finished_s"`
	FinishReason     string  `json:"finish_reason"`
	// Route is the endpoint and prompt form that sent the request, one of
	// the Route values ("" for the server's own requests).
	Route string `json:"route"`
	// PromptHash identifies the prompt's tokens: two requests with the same
	// hash sent the same prompt.
	PromptHash string `json:"prompt_hash"`
	// SampleOf is, for one of the n copies of a parallel-sampling request
	// (n > 1), the rid of the request the server sent first to prefill
	// their prompt, as SGLang does; "" otherwise. The copies reuse that
	// prompt by the server's design, not the client's.
	SampleOf string `json:"sample_of,omitempty"`
	// TTFT and E2E are the modelled times from arrival to the first token
	// (null for a request that never had one) and to the finish.
	TTFT *float64 `json:"ttft_s"`
	E2E  float64  `json:"e2e_s"`
	// PrefillCost is the modelled cost of the request's own prefill
	// chunks up to its first token (its share of each batch), and
	// ColdPrefillCost what prefilling its whole prompt with nothing cached
	// costs, chunk by chunk, on the same profile. Their difference is what
	// the prefix cache saved this request: with none of its prompt cached,
	// at the same moment, its TTFT and E2E would have been that much
	// longer.
	PrefillCost     float64 `json:"prefill_cost_s"`
	ColdPrefillCost float64 `json:"cold_prefill_cost_s"`
	// DPRank is the DP rank that ran the request, on a deployment of
	// several (absent on one): it could reuse that rank's cache only.
	DPRank *int `json:"dp_rank,omitempty"`
	// Tiers says which tier the cached tokens came from, on a server with
	// HiCache; absent without it.
	Tiers *CacheTiers `json:"cached_tiers,omitempty"`
	// CacheSalt says the request carried a cache_salt, whether or not the
	// server's release takes it on the request's route (SGLang's /generate
	// ignores it before PR #30827).
	CacheSalt bool `json:"cache_salt,omitempty"`
}

// CacheTiers is where a request's cached tokens came from under HiCache,
// as SGLang's cached_tokens_details splits them: device (the GPU's radix
// cache), host (loaded back from the host pool) and storage (prefetched
// from the storage backend, then loaded back). StorageBackend is the
// backend's class, empty without a storage tier. LoadBackTokens were
// loaded back from the host in the request's first prefill batch.
type CacheTiers struct {
	Device         int    `json:"device"`
	Host           int    `json:"host"`
	Storage        int    `json:"storage"`
	StorageBackend string `json:"storage_backend,omitempty"`
	LoadBackTokens int    `json:"load_back_tokens"`
}

// Prefetch is a request's prefetch from the storage tier: asked for at
// its arrival, ended when the scheduler took what it had read (all of its
// pages, or fewer when the policy cut it short).
type Prefetch struct {
	Issued       float64 `json:"issued_s"`
	Ended        float64 `json:"ended_s"`
	Pages        int     `json:"pages"`
	FetchedPages int     `json:"fetched_pages"`
	Tokens       int     `json:"tokens"`
	Terminated   bool    `json:"terminated"`
}

// Route values of RequestSummary.Route: what floor a prompt starts with
// depends on them (a BOS token on text, a chat template's head on chat).
const (
	RouteGenerate          = "/generate"                 // text
	RouteGenerateIDs       = "/generate input_ids"       // token ids
	RouteCompletions       = "/v1/completions"           // a text prompt
	RouteCompletionsTokens = "/v1/completions token ids" // a prompt of token ids
	RouteChat              = "/v1/chat/completions"
)

// Truth is GET /sim/requests/{rid}: a finished request's modelled timeline.
type Truth struct {
	RID              string `json:"rid"`
	PromptTokens     int    `json:"prompt_tokens"`
	CachedTokens     int    `json:"cached_tokens"`
	CompletionTokens int    `json:"completion_tokens"`
	// ReusedFrom is the rid of the request whose cached tokens the cached
	// prefix ends in; "" when nothing was cached.
	ReusedFrom string  `json:"reused_from"`
	Arrival    float64 `json:"arrival_s"`
	// Admitted is when the request left the waiting queue: into its
	// first prefill batch or, aborted there, at its abort; Queue is the
	// wait until then.
	Admitted float64 `json:"admitted_s"`
	// FirstToken and TTFT are null for a request that never had a first
	// token (aborted while queued or while its prompt was prefilled).
	FirstToken   *float64 `json:"first_token_s"`
	Finished     float64  `json:"finished_s"`
	Queue        float64  `json:"queue_s"`
	TTFT         *float64 `json:"ttft_s"`
	E2E          float64  `json:"e2e_s"`
	FinishReason string   `json:"finish_reason"`
	SpecVerifyCt int      `json:"spec_verify_ct"`
	// Retractions counts the times decode ran out of KV and the request
	// was retracted, or a request of higher priority preempted it, and it
	// was queued and prefilled again.
	Retractions int     `json:"num_retractions"`
	Prefill     []Chunk `json:"prefill"`
	Rounds      []Round `json:"rounds"`
	// DPRank is the DP rank that ran the request, on a deployment of
	// several (absent on one).
	DPRank *int `json:"dp_rank,omitempty"`
	// Tiers and Prefetch are HiCache's: absent without it, Prefetch absent
	// when the request had none.
	Tiers    *CacheTiers `json:"cached_tiers,omitempty"`
	Prefetch *Prefetch   `json:"prefetch,omitempty"`
}

// Chunk is one prefill chunk of a request.
type Chunk struct {
	Start    float64 `json:"start_s"`
	Duration float64 `json:"duration_s"` // the whole batch's
	Cost     float64 `json:"cost_s"`     // this chunk's share
	Prefix   int     `json:"prefix_tokens"`
	Tokens   int     `json:"tokens"`
	Batch    int     `json:"batch"`
	// LoadBack is the tokens loaded back from the host for the chunk
	// (HiCache), whose transfer the batch's duration overlaps.
	LoadBack int `json:"load_back_tokens,omitempty"`
}

// Round is a run of Count decode rounds a request took part in, back to
// back (each starting where the last ended), in batches of the same size
// and each gaining the same tokens: a request's timeline has a record per
// change of batch or gain or per pause (a prefill batch in between), not
// one per round. Start and Context are the run's first round's; Duration is
// the run's total, so a run ends at Start + Duration and round i of it
// starts on Context + i*Gained tokens. Summed over a request's runs,
// Duration, Count and Count*Gained are its exact decode time, rounds and
// decoded tokens.
type Round struct {
	Start    float64 `json:"start_s"`
	Duration float64 `json:"duration_s"`
	Gained   int     `json:"gained"`
	Batch    int     `json:"batch"`
	Context  int     `json:"context"`
	Count    int     `json:"count"`
}

// Flush is one /flush_cache call, in GET /sim/flushes.
type Flush struct {
	At       float64 `json:"at_s"`
	Timeout  float64 `json:"timeout_s"`
	Answered float64 `json:"answered_s"`
	// Outcome is "flushed", or the reason it was refused.
	Outcome string `json:"outcome"`
	OK      bool   `json:"ok"`
	Queued  int    `json:"queued"`
	Running int    `json:"running"`
	// Origin is the address of the client that asked.
	Origin string `json:"origin"`
	// Pending marks a flush still waiting for the server to be idle (or
	// its timeout): it is listed last, with no answer or outcome yet. It
	// runs even if its client has left (ClientLeft), as SGLang's does.
	Pending bool `json:"pending"`
	// ClientLeft is when the client stopped waiting for the answer; null
	// while it waits or once answered in time.
	ClientLeft *float64 `json:"client_left_s"`
	// Ranks is each DP rank's own answer, on a deployment of several
	// (absent on one). SGLang answers the client with the first rank's
	// answer to come (Outcome and OK), once every rank has answered, so a
	// flush answered 200 may have been refused by another rank: it is
	// flushed everywhere only when every rank's OK is true.
	Ranks []FlushRank `json:"ranks,omitempty"`
}

// FlushRank is one DP rank's answer to a flush.
type FlushRank struct {
	Rank     int     `json:"dp_rank"`
	Answered float64 `json:"answered_s"`
	// Outcome is "flushed", or why the rank refused; "" while it is
	// pending there.
	Outcome string `json:"outcome"`
	OK      bool   `json:"ok"`
	Queued  int    `json:"queued"`
	Running int    `json:"running"`
	Pending bool   `json:"pending"`
}

// Outcome values of Flush.
const OutcomeFlushed = "flushed"
