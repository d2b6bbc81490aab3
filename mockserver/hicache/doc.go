// Package hicache is the storage tier of SGLang's hierarchical cache: a
// store of KV pages keyed by SGLang's page hashes, which the engine backs
// pages up to and prefetches them from. It holds no KV (the mock has
// none), only which pages exist; what each costs is the engine's.
//
// # Keys
//
// A page's key is its hash as SGLang's get_hash_str writes it: the hex
// SHA-256 chained over the previous page's hash and the page's token ids
// (radixcache.Digest), the same for every server that sees the same
// tokens, whatever its cache namespace.
//
// # Backends
//
//   - File is SGLang's HiCacheFile: a directory (SGLang's
//     SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR, /tmp/hicache by default) of
//     one file a page, named KEY_MODEL_TPRANK_TPSIZE.bin, with the served
//     model name's slashes turned into dashes and, for an MLA model, whose
//     ranks hold the same KV, no rank suffix. TPSIZE is the attention
//     group's (tp_size, or tp_size / dp_size under DP attention); the mock
//     runs one process a DP rank and writes its rank 0's files, TPRANK 0.
//     A page written stays there:
//     a second server on the same directory, or the same server after a
//     restart, finds it. Clear removes every file of the directory, as
//     HiCacheFile.clear does.
//   - Memory is an in-process store standing in for the distributed
//     backends (Mooncake, 3FS, NIXL, ...): shared by the engines of one
//     process that are given it, gone when the process ends.
//
// # Metrics
//
// Metrics says what a backend reports of each storage batch to SGLang's
// storage histograms (sglang:prefetch_pgs, backup_pgs, prefetch_bandwidth,
// backup_bandwidth): only MooncakeStore and HiCacheHF3FS implement
// get_stats, each timing its batch get or set and dividing its bytes by
// 1 << 30; Mooncake weighs an MHA page by its K half, 3FS counts a
// page_first MHA page as two objects, K and V. The memory store reports
// its pages whole; HiCacheFile and the others report nothing.
//
// A Store is safe for concurrent use: several engines (DP ranks, a fleet)
// may share one, as SGLang's ranks share a backend.
package hicache
