package engine

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sglmock/sglmock/mockserver/hicache"
	"github.com/sglmock/sglmock/mockserver/profile"
	"github.com/sglmock/sglmock/radixcache"
)

// SGLang's HiCache constants.
const (
	// loadBackThreshold is HiRadixCache.load_back_threshold: a host hit of
	// fewer tokens is recomputed rather than loaded back.
	loadBackThreshold = 10
	// storageBatchPages is HiCacheController.storage_batch_size: storage
	// I/O goes in batches of this many pages.
	storageBatchPages = 128
)

// CacheTiers splits a request's cached tokens by the tier they came from,
// as SGLang's cached_tokens_details does (ScheduleBatch.prepare_for_extend:
// host is the host hit less what a prefetch brought from storage, device
// the rest of the cached tokens).
type CacheTiers struct {
	Device, Host, Storage int
	// Backend is the storage backend's class ("HiCacheFile"), empty
	// without a storage tier: SGLang then reports no storage figure.
	Backend string
}

// PrefetchRecord is a request's prefetch from the storage tier.
type PrefetchRecord struct {
	Issued     time.Duration // when it was asked for (the request's arrival)
	Ended      time.Duration // when the scheduler stopped it and took what it had
	Pages      int           // pages found in storage
	Fetched    int           // pages read by then
	Tokens     int           // tokens those pages hold that the tree lacked (cached from storage)
	Terminated bool          // stopped before reading every page (best_effort, timeout)
}

// HiCacheStats are the HiCache figures SGLang's metrics report: the host
// pool (sglang:hicache_host_*_tokens) and the lifetime counters of load
// backs, prefetches and backups.
type HiCacheStats struct {
	Enabled                            bool
	HostTotalTokens, HostUsedTokens    int
	HostBackedTokens, HostOnlyTokens   int
	LoadBackTokens                     int64 // sglang:load_back_tokens_total
	LoadBacks                          int64 // load backs (load_back_duration_seconds' count)
	PrefetchedTokens, BackedUpTokens   int64 // sglang:prefetched_tokens_total, backuped_tokens_total
	StorageBackend, StorageClass       string
	WritePolicy, PrefetchPolicy        string
	StoragePagesWritten, StorageErrors int64
	// Storage are the storage histograms, their bounds nil for a backend
	// that reports none.
	Storage StorageMetrics
}

// hostWrite is a write-through in flight on the write stream.
type hostWrite struct {
	node *radixcache.Node[string]
	end  time.Duration
}

// backupOp is a backup of a node's pages to storage on SGLang's backup
// thread, which runs one at a time.
type backupOp struct {
	node    *radixcache.Node[string]
	keys    []string // the node's pages the store lacked when it started
	batches []int    // how many of keys each storage batch of the node's pages holds
	tokens  int
	issued  time.Duration
	start   time.Duration
	applied int // pages put in the store so far
	logged  int // batches recorded for the storage metrics
	loggedN int // the pages to put those batches hold
}

// prefetchOp is a prefetch from storage into the host pool on SGLang's
// prefetch I/O thread, which reads one at a time.
type prefetchOp struct {
	r        *req
	from     *radixcache.Node[string] // last_host_node, protected while it runs
	at       int                      // the unit of the fill its pages start at
	tokens   int                      // len(prefetch_key): what prefetch_tokens_occupied counts
	pages    int                      // pages found in storage
	reserved int                      // host slots reserved for them
	issued   time.Duration
	ioStart  time.Duration
	stopAt   time.Duration // when the I/O thread stopped after a termination
	stopped  bool
	logged   int // batches recorded for the storage metrics
}

// hiCache is the scheduler's side of SGLang's HiCache: the transfers the
// host tier's writes and loads cost, and the storage tier. The tree keeps
// which tier holds each node.
type hiCache struct {
	cfg       *profile.HiCache
	extra     profile.StorageExtra
	page      int
	bigram    bool
	hostPool  int
	store     hicache.Store // nil without a storage backend
	zeroCopy  bool
	perRead   time.Duration // one page read from storage
	perWrite  time.Duration // one page written to storage
	capLimit  int           // prefetch_capacity_limit
	threshold int           // the controller's prefetch threshold: max(extra's, page)

	writes     []hostWrite
	writeFree  time.Duration
	backups    []*backupOp
	backupFree time.Duration // when the backup thread finished its last backup
	prefetches map[*req]*prefetchOp
	io         []*prefetchOp // in the I/O thread's order, until each has stopped and ended
	ioFree     time.Duration // when the I/O thread stopped the last prefetch it dropped
	occupied   int           // prefetch_tokens_occupied
	block      float64       // seconds of write-back the next iteration waits for
	stats      HiCacheStats
	storeErr   error            // the last storage I/O error, logged once
	recorder   *storageRecorder // nil for a backend without storage metrics

	// ioChanged: a prefetch joined io, left it or stopped since
	// ioSchedule last worked out the starts, which only that moves.
	ioChanged bool

	// sharers are the ranks whose backups write to store, this one
	// included.
	sharers []*scheduler
}

// errStorageDir is a file backend without a directory.
var errStorageDir = errors.New("engine: the file storage backend needs a directory (Config.HiCacheStorageDir)")

// newHiCache sets up HiCache for a scheduler whose tree it gives a host
// tier. model names the file backend's pages.
func newHiCache(p *profile.Profile, tree *radixcache.Tree[string], cfg Config) (*hiCache, error) {
	h := p.HiCacheConfig()
	extra, err := profile.ParseStorageExtra(h.StorageExtraConfig, p.Rules())
	if err != nil {
		return nil, err
	}
	hc := &hiCache{
		cfg: h, extra: extra, page: p.PageSize, bigram: p.BigramKeys(),
		hostPool:   h.HostPoolTokens(p.MaxTotalTokens, p.PageSize),
		prefetches: make(map[*req]*prefetchOp),
	}
	tier := radixcache.HostTier{Capacity: hc.hostPool, WriteThreshold: h.WriteThreshold(), UntieredEvents: !p.Rules().HostKVEvents}
	if err := tree.EnableHost(tier); err != nil {
		return nil, err
	}
	hc.stats = HiCacheStats{Enabled: true, HostTotalTokens: hc.hostPool, WritePolicy: h.WritePolicy,
		PrefetchPolicy: h.PrefetchPolicy, StorageBackend: h.StorageBackend}
	if h.StorageBackend == "" {
		return hc, nil
	}
	switch store := cfg.HiCacheStore; {
	case store != nil:
		hc.store = store
	case h.StorageBackend == "file":
		if cfg.HiCacheStorageDir == "" {
			return nil, errStorageDir
		}
		model := cmp.Or(cfg.ServedModelName, p.ServedModelName)
		if hc.store, err = hicache.NewFile(cfg.HiCacheStorageDir, model, p.AttnTPSize(), h.KV.MLA()); err != nil {
			return nil, err
		}
	default:
		hc.store = hicache.NewMemory(hicache.Classes[h.StorageBackend], hicache.MemoryPages)
	}
	hc.stats.StorageClass = hc.store.Class()
	hc.zeroCopy = hicache.ZeroCopy(h.StorageBackend)
	if rule, ok := hicache.Metrics(h.StorageBackend, h.MemLayout, h.KV.MLA(), h.PageBytes(p.PageSize)); ok {
		hc.recorder = &storageRecorder{rule: rule}
		hc.stats.Storage = newStorageMetrics()
	}
	hc.perRead = profile.Duration(h.StorageReadSeconds(1, p.PageSize))
	hc.perWrite = profile.Duration(h.StorageWriteSeconds(1, p.PageSize))
	hc.capLimit = max(0, int(0.8*float64(hc.hostPool-p.MaxTotalTokens)))
	hc.threshold = max(extra.PrefetchThreshold, p.PageSize)
	return hc, nil
}

// takeHostWrites schedules the backups the tree started: a write-through
// goes on the write stream, after the writes before it; a write-back
// blocks the scheduler, which the next iteration pays, and then goes to
// storage.
func (s *scheduler) takeHostWrites() {
	hc := s.hi
	for _, w := range s.tree.TakeHostWrites() {
		secs := hc.cfg.HostTransferSeconds(w.Tokens)
		if w.WriteBack {
			hc.block += secs
			s.backupToStorage(w.Node)
			continue
		}
		start := max(s.now, hc.writeFree)
		hc.writeFree = start + profile.Duration(secs)
		hc.writes = append(hc.writes, hostWrite{node: w.Node, end: hc.writeFree})
	}
}

// takeBlock is the write-back time the iteration being planned waits for:
// SGLang's evict blocks until the writes it started are done.
func (s *scheduler) takeBlock() float64 {
	if s.hi == nil {
		return 0
	}
	b := s.hi.block
	s.hi.block = 0
	return b
}

// pollHiCache is check_hicache_events at a boundary: write-throughs done
// by now release their nodes and go to storage; backups' pages done by now
// reach the store.
func (s *scheduler) pollHiCache() {
	hc := s.hi
	if hc == nil {
		return
	}
	n := 0
	for _, w := range hc.writes {
		if w.end > s.now {
			break
		}
		n++
		if err := s.tree.HostWriteDone(w.node); err != nil {
			panic(err) // a node written through is locked until now
		}
		s.backupToStorage(w.node)
	}
	hc.writes = slices.Delete(hc.writes, 0, n)
	s.applyBackups(s.now)
	hc.ioSchedule()
	hc.logStorageIO(s.now)
	hc.ioRetire(s.now)
	s.takeHostWrites()
}

// logStorageIO logs the storage batches whose I/O ended by t into the
// storage histograms: SGLang's scheduler runs check_hicache_events on
// every pass of its loop, idle or not, so a batch shows as its I/O ends.
// The prefetches' batches and those of the backup in progress are known
// between boundaries; a backup that starts after t's last boundary is
// logged at the next.
func (hc *hiCache) logStorageIO(t time.Duration) {
	if hc.recorder == nil {
		return
	}
	hc.ioSchedule()
	for _, op := range hc.io {
		op.logBatches(hc, t)
	}
	if len(hc.backups) > 0 && hc.backups[0].keys != nil && t >= hc.backups[0].start {
		b := hc.backups[0]
		b.logBatches(hc, b.batchesDone(int((t-b.start)/hc.perWrite)))
	}
	hc.recorder.drain(&hc.stats.Storage)
}

// backupToStorage is write_backup_storage: a node now on the host goes to
// storage, its host copy protected until the backup is done.
func (s *scheduler) backupToStorage(n *radixcache.Node[string]) {
	hc := s.hi
	if hc.store == nil {
		return
	}
	if err := s.tree.ProtectHost(n); err != nil {
		panic(err) // the node was backed up just now
	}
	hc.backups = append(hc.backups, &backupOp{node: n, tokens: n.Len(), issued: s.now})
}

// applyBackups runs the backup thread up to time t: each backup starts
// when the one before it is done, skips the pages the store has, and puts
// each page as its write ends (a batch of them at a time for a zero-copy
// backend); a backup done releases its node's host copy.
func (s *scheduler) applyBackups(t time.Duration) {
	hc := s.hi
	if hc.store == nil {
		return
	}
	for len(hc.backups) > 0 {
		b := hc.backups[0]
		if b.keys == nil {
			b.start = max(b.issued, hc.backupFree)
			if b.start > t {
				return
			}
			b.keys, b.batches = s.missingPages(b.node)
		}
		end := b.start + time.Duration(len(b.keys))*hc.perWrite
		due := len(b.keys)
		if end > t {
			due = int((t - b.start) / hc.perWrite)
			if hc.zeroCopy {
				due = b.batchesDone(due)
			}
		}
		b.logBatches(hc, due)
		for ; b.applied < due; b.applied++ {
			if err := hc.store.Put(b.keys[b.applied]); err != nil {
				s.storageError(err)
				continue
			}
			hc.stats.StoragePagesWritten++
		}
		if end > t {
			return
		}
		if err := s.tree.ReleaseHost(b.node); err != nil {
			panic(err) // protected since the backup began
		}
		hc.stats.BackedUpTokens += int64(b.tokens)
		hc.backupFree = end
		hc.backups = hc.backups[1:]
	}
}

// missingPages are n's page keys the store lacks, and how many of them
// each storage batch of n's pages holds (_page_backup sets a batch at a
// time, the backend only the pages it lacks).
func (s *scheduler) missingPages(n *radixcache.Node[string]) (keys []string, batches []int) {
	keys = []string{}
	for i, d := range n.Digests() {
		if i%storageBatchPages == 0 {
			batches = append(batches, 0)
		}
		k := hicache.Key(d)
		if ok, err := s.hi.store.Exists(k); err != nil {
			s.storageError(err)
		} else if !ok {
			keys = append(keys, k)
			batches[len(batches)-1]++
		}
	}
	return keys, batches
}

// batchesDone is how many of b's pages the batches whose writes are done
// after its first written pages hold: a zero-copy backend's set returns
// with its whole batch.
func (b *backupOp) batchesDone(written int) int {
	done := 0
	for _, n := range b.batches {
		if done+n > written {
			break
		}
		done += n
	}
	return done
}

// logBatches records for the storage metrics b's batches written with its
// first done pages: each batch's pages to put, over its write time.
func (b *backupOp) logBatches(hc *hiCache, done int) {
	if hc.recorder == nil {
		return
	}
	for ; b.logged < len(b.batches); b.logged++ {
		n := b.batches[b.logged]
		if b.loggedN+n > done {
			return
		}
		b.loggedN += n
		hc.recorder.recordBackup(n, time.Duration(n)*hc.perWrite)
	}
}

func (s *scheduler) storageError(err error) {
	hc := s.hi
	hc.stats.StorageErrors++
	if hc.storeErr == nil || hc.storeErr.Error() != err.Error() {
		s.log.Warn(fmt.Sprintf("HiCache storage backend %s: %v", hc.stats.StorageClass, err))
	}
	hc.storeErr = err
}

// startPrefetch is the scheduler's _prefetch_kvcache for a request it
// receives: the part of its fill beyond what the device and the host hold
// is looked up in storage, page by page from the last backed-up node's
// hash, and the pages found are read into host slots reserved for them
// (HiRadixCache.prefetch_from_storage, HiCacheController's prefetch
// thread).
func (s *scheduler) startPrefetch(r *req, at time.Duration) {
	hc := s.hi
	if hc == nil || hc.store == nil || s.tree == nil {
		return
	}
	fill := r.fill()
	limit := max(min(len(fill)-1, r.maxCached), 0)
	m := s.tree.MatchTiers(r.ns, fill[:limit])
	matched := m.Device + m.Host
	units := len(fill)
	if hc.bigram {
		units--
	}
	n := units - matched
	n -= n % hc.page
	if n < hc.extra.PrefetchThreshold || hc.occupied >= hc.capLimit {
		return
	}
	from := m.Backed
	if err := s.tree.ProtectHost(from); err != nil {
		panic(err) // MatchTiers just returned it
	}
	if !s.tree.HostReserve(n) {
		avail := s.tree.HostFree()
		n = avail - avail%hc.page
		if n < hc.extra.PrefetchThreshold || !s.tree.HostReserve(n) {
			s.tree.ReleaseHost(from)
			return
		}
	}
	op := &prefetchOp{r: r, from: from, at: matched, tokens: n, reserved: n, issued: at}
	// The prefetch thread's query: the pages' keys, chained from the last
	// backed-up node's hash, found in storage in a row. Every rank's backup
	// thread writes to the store on its own: the pages whose writes ended
	// by now are there, whichever rank wrote them.
	for _, peer := range hc.sharers {
		peer.applyBackups(at)
	}
	var prior *radixcache.Digest
	if d, ok := from.LastDigest(); ok {
		prior = &d
	}
	for _, d := range radixcache.PageDigests(prior, fill, matched, n/hc.page, hc.page, hc.bigram) {
		ok, err := hc.store.Exists(hicache.Key(d))
		if err != nil {
			s.storageError(err)
		}
		if !ok {
			break
		}
		op.pages++
	}
	if op.pages*hc.page < hc.threshold {
		// Not worth it: revoked, its slots released.
		s.tree.HostRelease(op.reserved)
		s.tree.ReleaseHost(from)
		return
	}
	s.tree.HostRelease(op.reserved - op.pages*hc.page)
	op.reserved = op.pages * hc.page
	hc.occupied += op.tokens
	hc.prefetches[r] = op
	hc.io = append(hc.io, op)
	hc.ioChanged = true
}

// ioSchedule works out when each prefetch on the I/O thread starts: when
// it was asked for, or when the one before it stopped reading. A
// termination, always at the scheduler's time, shortens a prefetch that has
// not ended yet, so only the starts still ahead can move.
func (hc *hiCache) ioSchedule() {
	if !hc.ioChanged {
		return // every waiting request asks each pass: once per change
	}
	free := hc.ioFree
	for _, op := range hc.io {
		op.ioStart = max(op.issued, free)
		free = op.stop(hc)
	}
	hc.ioChanged = false
}

// ioRetire drops from the I/O thread's list the prefetches at its head that
// ended and stopped reading by time t.
func (hc *hiCache) ioRetire(t time.Duration) {
	for len(hc.io) > 0 {
		op := hc.io[0]
		if hc.prefetches[op.r] == op || op.stop(hc) > t {
			return
		}
		op.logBatches(hc, t)
		hc.ioFree = op.stop(hc)
		hc.io = hc.io[1:]
		hc.ioChanged = true
	}
}

// stop is when op's reads end: its last page, or after a termination the
// page (a zero-copy backend: the batch) it was reading.
func (op *prefetchOp) stop(hc *hiCache) time.Duration {
	if op.stopped {
		return op.stopAt
	}
	return op.ioStart + time.Duration(op.pages)*hc.perRead
}

// logBatches records for the storage metrics op's batches read by time t
// (the I/O thread reads a batch at a time and stops after the one it reads
// when it is terminated): each batch's pages, over its read time.
func (op *prefetchOp) logBatches(hc *hiCache, t time.Duration) {
	if hc.recorder == nil {
		return
	}
	end := min(t, op.stop(hc))
	for ; op.logged*storageBatchPages < op.pages; op.logged++ {
		first := op.logged * storageBatchPages
		n := min(storageBatchPages, op.pages-first)
		if op.ioStart+time.Duration(first+n)*hc.perRead > end {
			return
		}
		hc.recorder.recordPrefetch(n, time.Duration(n)*hc.perRead)
	}
}

// fetched is how many of op's pages are read by time t: a zero-copy
// backend counts them a batch at a time.
func (op *prefetchOp) fetched(hc *hiCache, t time.Duration) int {
	if t <= op.ioStart {
		return 0
	}
	if t >= op.stop(hc) && !op.stopped {
		return op.pages
	}
	n := min(int((min(t, op.stop(hc))-op.ioStart)/hc.perRead), op.pages)
	if hc.zeroCopy && n < op.pages {
		n -= n % storageBatchPages
	}
	return n
}

// prefetchReady is check_prefetch_progress for r at the scheduler's time:
// true when r has no prefetch or its policy lets it stop now, in which case
// it stops and what it read goes into the tree. best_effort stops at once,
// wait_complete when every page is read, timeout then too or once the
// linear timeout for its pages has passed.
func (s *scheduler) prefetchReady(r *req) bool {
	hc := s.hi
	if hc == nil {
		return true
	}
	op, ok := hc.prefetches[r]
	if !ok {
		return true
	}
	hc.ioSchedule()
	done := op.fetched(hc, s.now) == op.pages
	switch hc.cfg.PrefetchPolicy {
	case "wait_complete":
		if !done {
			return false
		}
	case "timeout":
		limit := profile.Duration(hc.extra.PrefetchTimeoutSeconds(op.pages * hc.page))
		if !done && s.now-op.issued <= limit {
			return false
		}
	}
	s.endPrefetch(op, true)
	return true
}

// endPrefetch stops op at the scheduler's time. With insert, the pages read
// go into the tree as host-only nodes after the node it started from
// (_insert_helper_host), and the tokens the tree lacked count as r's
// storage hit; without (an abort), its slots are released.
func (s *scheduler) endPrefetch(op *prefetchOp, insert bool) {
	hc := s.hi
	hc.ioSchedule()
	fetched := op.fetched(hc, s.now)
	if fetched < op.pages && !op.stopped {
		// The I/O thread ends the page (zero-copy: the batch) it reads.
		unit := hc.perRead
		if hc.zeroCopy {
			unit *= storageBatchPages
		}
		elapsed := max(s.now-op.ioStart, 0)
		op.stopAt = op.ioStart + min((elapsed+unit-1)/unit*unit, time.Duration(op.pages)*hc.perRead)
		op.stopped = true
		hc.ioChanged = true
	}
	r := op.r
	rec := &PrefetchRecord{Issued: op.issued, Ended: s.now, Pages: op.pages, Fetched: fetched, Terminated: fetched < op.pages}
	inserted := 0
	if insert && fetched > 0 {
		units := op.at + fetched*hc.page
		key := r.fill()
		if hc.bigram {
			units++
		}
		matched, ins, err := s.tree.InsertHost(op.from, r.ns, key[:min(units, len(key))], op.at, r.rid)
		if err != nil {
			panic(err) // the node it started from is protected
		}
		inserted = ins
		rec.Tokens = fetched*hc.page - matched
		hc.stats.PrefetchedTokens += int64(rec.Tokens)
	}
	s.tree.HostRelease(op.reserved - inserted)
	if err := s.tree.ReleaseHost(op.from); err != nil {
		panic(err) // protected since the prefetch began
	}
	hc.occupied -= op.tokens
	delete(hc.prefetches, r)
	r.prefetch = rec
	hc.ioRetire(s.now)
}

// dropPrefetch ends r's prefetch without using it: r was aborted while it
// waited (release_aborted_request).
func (s *scheduler) dropPrefetch(r *req) {
	if s.hi == nil {
		return
	}
	if op, ok := s.hi.prefetches[r]; ok {
		s.endPrefetch(op, false)
	}
}

// loadBack is init_load_back at admission: a host hit of at least
// loadBackThreshold tokens is brought back to the device, after evicting
// for its size when the pool is short (all of it, as load_back does), and
// r then holds the loaded end. It returns the tokens loaded.
func (s *scheduler) loadBack(r *req, m radixcache.TierMatch[string]) int {
	if s.hi == nil || m.Host < loadBackThreshold {
		return 0
	}
	if err := s.tree.ProtectHost(m.End); err != nil {
		panic(err) // MatchTiers just returned it
	}
	if s.free() < m.Host {
		s.evict(m.Host)
	}
	s.tree.ReleaseHost(m.End)
	if s.free() < m.Host {
		return 0
	}
	n, err := s.tree.LoadBack(m.End)
	if err != nil {
		panic(err)
	}
	if err := s.tree.Lock(m.End); err != nil {
		panic(err)
	}
	s.unlock(r)
	r.node, r.kvLen = m.End, m.End.PrefixLen()
	s.hi.stats.LoadBackTokens += int64(n)
	s.hi.stats.LoadBacks++
	return n
}

// hiCacheDrained is the HiCache half of SGLang's is_fully_idle: no write,
// backup or prefetch in flight (load backs end with their batch).
func (s *scheduler) hiCacheDrained() bool {
	hc := s.hi
	return hc == nil || len(hc.writes) == 0 && len(hc.backups) == 0 && len(hc.prefetches) == 0
}

// hiCacheWake is the next time a HiCache transfer ends after the
// scheduler's time: a write-through, a backup to storage, a prefetch a
// request waits for. What ended by now the last boundary handled already;
// a prefetch that ended while its request waits behind one that cannot be
// admitted changes nothing by itself, so it is no reason to wake.
func (s *scheduler) hiCacheWake() (time.Duration, bool) {
	hc := s.hi
	if hc == nil {
		return 0, false
	}
	var at time.Duration
	due := false
	pick := func(t time.Duration) {
		if t > s.now && (!due || t < at) {
			at, due = t, true
		}
	}
	if len(hc.prefetches) > 0 {
		hc.ioSchedule()
		for _, op := range hc.prefetches {
			w := op.stop(hc)
			if hc.cfg.PrefetchPolicy == "timeout" {
				w = min(w, op.issued+profile.Duration(hc.extra.PrefetchTimeoutSeconds(op.pages*hc.page))+1)
			}
			pick(w)
		}
	}
	if len(hc.writes) > 0 {
		pick(hc.writes[0].end)
	}
	if len(hc.backups) > 0 {
		b := hc.backups[0]
		if b.keys == nil {
			pick(max(b.issued, hc.backupFree))
		} else {
			pick(b.start + time.Duration(len(b.keys))*hc.perWrite)
		}
	}
	return at, due
}

// resetHiCache is HiRadixCache.reset on a flush: the controller's queues
// and the host pool (the tree's) empty; storage stays.
func (s *scheduler) resetHiCache() {
	if hc := s.hi; hc != nil {
		// The batches read by now are the backend's to report.
		hc.logStorageIO(s.now)
		hc.writes, hc.backups, hc.io = nil, nil, nil
		hc.ioChanged = true
		clear(hc.prefetches)
		hc.occupied, hc.block = 0, 0
	}
}

// ClearStorage empties the storage tier, as /clear_hicache_storage_backend
// does (HiRadixCache.clear_storage_backend). It reports whether HiCache is
// on (SGLang answers success then, with a storage backend or without) and
// whether there was a storage tier to clear. The ranks share one store, so
// it is cleared once, by the first rank.
func (e *Engine) ClearStorage() (hicacheOn, cleared bool, err error) {
	e.do(func(time.Duration) {
		s := e.ranks[0]
		if s.hi == nil {
			return
		}
		hicacheOn = true
		if s.hi.store == nil {
			s.log.Warn("Hierarchical cache storage backend is not enabled.")
			return
		}
		if err = s.hi.store.Clear(); err != nil {
			s.log.Error(fmt.Sprintf("Failed to clear hierarchical cache storage backend: %v", err))
			return
		}
		cleared = true
		s.log.Info("Hierarchical cache storage backend cleared successfully!")
	})
	return hicacheOn, cleared, err
}

// HiCache returns the HiCache figures, Enabled false when it is off: the
// ranks' host pools and counters added up.
func (e *Engine) HiCache() HiCacheStats {
	ranks := e.HiCacheRanks()
	st := ranks[0]
	for _, rs := range ranks[1:] {
		st.HostTotalTokens += rs.HostTotalTokens
		st.HostUsedTokens += rs.HostUsedTokens
		st.HostBackedTokens += rs.HostBackedTokens
		st.HostOnlyTokens += rs.HostOnlyTokens
		st.LoadBackTokens += rs.LoadBackTokens
		st.LoadBacks += rs.LoadBacks
		st.PrefetchedTokens += rs.PrefetchedTokens
		st.BackedUpTokens += rs.BackedUpTokens
		st.StoragePagesWritten += rs.StoragePagesWritten
		st.StorageErrors += rs.StorageErrors
		st.Storage.Add(rs.Storage)
	}
	return st
}

// HiCacheRanks returns each DP rank's HiCache figures, in rank order.
func (e *Engine) HiCacheRanks() []HiCacheStats {
	out := make([]HiCacheStats, len(e.ranks))
	e.do(func(at time.Duration) {
		for r, s := range e.ranks {
			out[r] = s.hiCacheStats(at)
		}
	})
	return out
}

// hiCacheStats are s's HiCache figures at time at.
func (s *scheduler) hiCacheStats(at time.Duration) HiCacheStats {
	hc := s.hi
	if hc == nil {
		return HiCacheStats{}
	}
	hc.logStorageIO(max(at, s.now))
	st := hc.stats
	st.Storage = st.Storage.clone()
	ts := s.tree.Stats()
	st.HostUsedTokens = hostUsedTokens(ts)
	st.HostBackedTokens, st.HostOnlyTokens = ts.HostTokens, ts.HostOnly
	return st
}

// hostUsedTokens is the host pool's tokens taken: the nodes backed up
// there and the slots reserved for prefetches.
func hostUsedTokens(ts radixcache.Stats) int { return ts.HostTokens + ts.HostReserved }

// shareStore tells each rank with a storage tier which ranks write to it:
// all of them, as they share one store.
func shareStore(ranks []*scheduler) {
	var sharers []*scheduler
	for _, s := range ranks {
		if s.hi != nil && s.hi.store != nil {
			sharers = append(sharers, s)
		}
	}
	for _, s := range sharers {
		s.hi.sharers = sharers
	}
}
