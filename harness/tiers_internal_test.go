package harness

import "testing"

// tierClause names the tiers a reuse came from, and what each means for a
// benchmark: nothing when all came from the device (a server without
// HiCache says so too).
func TestTierClause(t *testing.T) {
	for _, tc := range []struct {
		t    *Tiers
		want string
	}{
		{nil, ""},
		{&Tiers{Device: 100}, ""},
		{&Tiers{Storage: 45504, StorageBackend: "HiCacheFile"}, ", all from the storage tier: /flush_cache does not clear it; call /clear_hicache_storage_backend or keep the nonce"},
		{&Tiers{Host: 999}, ", all from the host tier (HiCache kept them in host memory when the GPU evicted them)"},
		{&Tiers{Device: 64, Host: 128}, ", 64 from the device tier, 128 from the host tier (HiCache kept the host's in host memory when the GPU evicted them)"},
		{&Tiers{Device: 64, Storage: 640}, ", 64 from the device tier, 640 from the storage tier: /flush_cache does not clear the storage tier; call /clear_hicache_storage_backend or keep the nonce"},
	} {
		if got := tierClause(tc.t); got != tc.want {
			t.Errorf("%+v: got %q, want %q", tc.t, got, tc.want)
		}
	}
	var v Verdict
	storageCheck(&v, FlushNonce, Server{HiCacheStorage: "file"})
	storageCheck(&v, FlushMethod, Server{})
	if v.Level() != OK {
		t.Fatalf("flush+nonce, or flush without storage: %s, want ok", v.String())
	}
	storageCheck(&v, FlushMethod, Server{HiCacheStorage: "mooncake"})
	if v.Level() != Suspect {
		t.Fatalf("flush on a server with storage: %s, want SUSPECT", v.String())
	}
}
