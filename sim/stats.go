package sim

// Stats is GET /sim/stats: the engine's load and prefix cache now, and its
// cache hits since it started. Token counts are KV slots.
type Stats struct {
	Now     float64 `json:"now_s"`   // simulated seconds since start
	Running int     `json:"running"` // decoding or prefilling
	Queued  int     `json:"queued"`
	// KVUsed is SGLang's num_used_tokens, of KVCapacity.
	KVUsed     int `json:"kv_used_tokens"`
	KVCapacity int `json:"kv_capacity_tokens"`
	// CacheTokens is what the radix cache holds, CacheEvictable the part no
	// request holds.
	CacheTokens    int `json:"cache_tokens"`
	CacheEvictable int `json:"cache_evictable_tokens"`
	// PromptTokens and CachedTokens count every finished request's prompt
	// and the part of it served from the cache; HitRate is their ratio
	// (0 before any prompt).
	Requests     int64   `json:"requests"`
	PromptTokens int64   `json:"prompt_tokens"`
	CachedTokens int64   `json:"cached_tokens"`
	HitRate      float64 `json:"hit_rate"`
	// StalledStreamsAborted counts the clients cut off because they
	// stopped reading an answer or a stream (their requests aborted).
	StalledStreamsAborted int64 `json:"stalled_streams_aborted"`
	// Memory is what the clients make the server hold now against its
	// budgets, and what was refused, waited for or cut to stay inside them.
	Memory Memory `json:"memory"`
	// KVEvents is the KV event publisher's counts; nil without one.
	KVEvents *KVEvents `json:"kv_events,omitempty"`
}

// Memory is the server's budgets in bytes: request bodies in flight (a
// render's token ids included), and what generation requests hold until
// their answers are written.
type Memory struct {
	// BodyBytes is what request bodies hold now, of BodyBudget; BodyPeak
	// the most they held; BodiesRefused the requests answered 503 because
	// their body did not fit.
	BodyBytes     int64 `json:"body_bytes"`
	BodyBudget    int64 `json:"body_budget_bytes"`
	BodyPeak      int64 `json:"body_peak_bytes"`
	BodiesRefused int64 `json:"bodies_refused"`
	// AnswerBytes is what generation requests hold now, of AnswerBudget;
	// AnswerPeak the most they held; AnswersWaiting the requests waiting
	// for room now, AnswersWaited those that had to wait; ReadersCut the
	// clients cut off because they read their complete answer too slowly
	// while others waited.
	AnswerBytes    int64 `json:"answer_bytes"`
	AnswerBudget   int64 `json:"answer_budget_bytes"`
	AnswerPeak     int64 `json:"answer_peak_bytes"`
	AnswersWaiting int   `json:"answers_waiting"`
	AnswersWaited  int64 `json:"answers_waited"`
	ReadersCut     int64 `json:"readers_cut"`
}

// KVEvents counts what the KV event publisher sent and what it dropped
// to keep its memory bounded.
type KVEvents struct {
	Batches   int64 `json:"batches"`   // batches the engine published
	Published int64 `json:"published"` // batches sent on the socket
	// DroppedQueueFull counts batches dropped because the publisher's
	// queue was full (in batches or in bytes).
	DroppedQueueFull int64 `json:"dropped_queue_full"`
	// Subscribers is the subscribers connected now; SubscriberDrops the
	// messages not sent to a subscriber whose queue was full; and
	// SubscribersCut the connections ended because they stopped reading,
	// subscribed past 256 prefixes or 64 KiB of them, were the oldest of
	// the handshakes or idle subscribers in the way of a new one, or were
	// refused.
	Subscribers     int   `json:"subscribers"`
	SubscriberDrops int64 `json:"subscriber_drops"`
	SubscribersCut  int64 `json:"subscribers_cut"`
	// ReplayClientsCut counts replay clients disconnected because they
	// stopped reading, asked nothing for 10 s, were the one idle longest
	// when a new one came, or were refused; ReplayMalformed the malformed
	// replay requests.
	ReplayClientsCut int64 `json:"replay_clients_cut"`
	ReplayMalformed  int64 `json:"replay_malformed"`
	// ReplayBufferBytes is what the replay buffer holds now.
	ReplayBufferBytes int64 `json:"replay_buffer_bytes"`
}
