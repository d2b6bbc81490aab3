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
}
