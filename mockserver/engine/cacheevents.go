package engine

import (
	"fmt"
	"time"

	"github.com/sglmock/sglmock/radixcache"
)

// CacheEvents is told of every change to the radix cache's pages (the
// radixcache.Observer calls, on the engine goroutine) and, at the points
// where SGLang's scheduler publishes its KV events, asked to publish what
// it has gathered since. SGLang publishes after logging a prefill batch,
// after logging a decode batch (every decode-log interval) and when the
// scheduler is idle; the mock does the same at its own prefill and decode
// log points and before it waits idle. A disabled radix cache (SGLang's
// ChunkCache) stores no page and publishes nothing.
type CacheEvents interface {
	radixcache.Observer
	// Publish sends the events gathered since the last call, if any, as
	// one batch stamped with the wall time of the modelled moment. It runs
	// on the engine goroutine and must not block.
	Publish(at time.Time)
}

// cacheEvents is the scheduler's side of CacheEvents.
type cacheEvents struct {
	sink CacheEvents
	wall func(sim time.Duration) time.Time
}

// observeCache makes the radix cache report to sink.
func (s *scheduler) observeCache(sink CacheEvents, wall func(time.Duration) time.Time) {
	if s.tree == nil {
		return
	}
	if err := s.tree.Observe(sink); err != nil {
		panic(err) // a new scheduler's tree is empty
	}
	s.events = &cacheEvents{sink: sink, wall: wall}
}

// publishCacheEvents is a publication point.
func (s *scheduler) publishCacheEvents() {
	if s.events != nil {
		s.events.sink.Publish(s.events.wall(s.now))
	}
}

// CachePages returns every page of DP rank rank's radix cache with its
// block hash, each after the page it hangs from, as the rank's KV events
// announced them; nil without its CacheEvents or with the radix cache
// disabled.
func (e *Engine) CachePages(rank int) ([]radixcache.PageRecord, error) {
	if rank < 0 || rank >= len(e.ranks) {
		return nil, fmt.Errorf("engine: no DP rank %d (the deployment has %d)", rank, len(e.ranks))
	}
	var pages []radixcache.PageRecord
	err := e.do(func(time.Duration) {
		s := e.ranks[rank]
		if s.events == nil {
			return
		}
		for p := range s.tree.Pages() {
			pages = append(pages, p)
		}
	})
	return pages, err
}
