package hicache

import "testing"

// Each backend's figures for a page of 1 GiB of KV: what a page counts
// for and what one object weighs, as its get_stats reports them.
func TestMetricsOfEachBackend(t *testing.T) {
	for _, tc := range []struct {
		backend, layout string
		mla             bool
		want            BatchMetrics
		ok              bool
	}{
		{"mooncake", "page_first", false, BatchMetrics{IOsPerPage: 1, GiBPerIO: 0.5}, true},
		{"mooncake", "page_first", true, BatchMetrics{IOsPerPage: 1, GiBPerIO: 1}, true},
		{"hf3fs", "page_first", false, BatchMetrics{IOsPerPage: 2, GiBPerIO: 0.5, EmptyBackups: true}, true},
		{"hf3fs", "page_first_direct", true, BatchMetrics{IOsPerPage: 1, GiBPerIO: 1, EmptyBackups: true}, true},
		{"hf3fs", "layer_first", false, BatchMetrics{IOsPerPage: 1, GiBPerIO: 1, EmptyBackups: true}, true},
		{"memory", "layer_first", false, BatchMetrics{IOsPerPage: 1, GiBPerIO: 1}, true},
		{"file", "layer_first", false, BatchMetrics{}, false},
		{"nixl", "page_first", false, BatchMetrics{}, false},
	} {
		got, ok := Metrics(tc.backend, tc.layout, tc.mla, gib)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s %s mla=%v: got %+v %v, want %+v %v", tc.backend, tc.layout, tc.mla, got, ok, tc.want, tc.ok)
		}
	}
	m := BatchMetrics{IOsPerPage: 2, GiBPerIO: 0.5}
	if got := m.Bandwidth(128, 0.25); got != 512 {
		t.Errorf("128 pages in 0.25 s: got %v GiB/s, want 512", got)
	}
	if got := m.Bandwidth(0, 0); got != 0 {
		t.Errorf("no pages: got %v, want 0", got)
	}
}
