package profile

import (
	"flag"
	"fmt"
	"strings"
)

// hicacheFlags are SGLang's HiCache launch flags.
type hicacheFlags struct {
	enable                                  bool
	ratio                                   float64
	sizeGB                                  int
	writePolicy, ioBackend, memLayout       string
	storageBackend, prefetchPolicy, extraCf string
}

func registerHiCacheFlags(fs *flag.FlagSet) *hicacheFlags {
	h := &hicacheFlags{}
	fs.BoolVar(&h.enable, "enable-hierarchical-cache", false, "enable HiCache: a host tier under the radix cache (the profile's hicache section gives its costs)")
	fs.Float64Var(&h.ratio, "hicache-ratio", defaultHiCacheRatio, "the host pool as a multiple of the device pool")
	fs.IntVar(&h.sizeGB, "hicache-size", 0, "the host pool in GB of KV; overrides --hicache-ratio")
	fs.StringVar(&h.writePolicy, "hicache-write-policy", defaultWritePolicy, "when a node is backed up to the host: "+strings.Join(WritePolicies, ", "))
	fs.StringVar(&h.ioBackend, "hicache-io-backend", defaultIOBackend, "the device-host I/O backend: "+strings.Join(IOBackends, ", "))
	fs.StringVar(&h.memLayout, "hicache-mem-layout", defaultMemLayout, "the host pool's layout: "+strings.Join(MemLayouts, ", "))
	fs.StringVar(&h.storageBackend, "hicache-storage-backend", "", "the storage tier: file (a directory of page files, "+
		"$SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR or /tmp/hicache), memory, or "+strings.Join(StorageBackends[1:len(StorageBackends)-1], ", ")+
		" (the in-process store stands in for them); /flush_cache does not clear it, /clear_hicache_storage_backend does")
	fs.StringVar(&h.prefetchPolicy, "hicache-storage-prefetch-policy", "", "when a prefetch from storage stops: "+strings.Join(PrefetchPolicies, ", ")+
		" (default: timeout, or best_effort in an SGLang release before 0.5.12)")
	fs.StringVar(&h.extraCf, "hicache-storage-backend-extra-config", "", "JSON, or @FILE (.json, .yaml): prefetch_threshold, prefetch_timeout_base, prefetch_timeout_per_ki_token, prefetch_timeout_max")
	return h
}

// apply overrides p's HiCache with the flags that were set. A flag that
// needs the section's costs on a profile without them says so.
func (h *hicacheFlags) apply(p *Profile, set map[string]bool) error {
	any := false
	for name := range set {
		if name == "enable-hierarchical-cache" || strings.HasPrefix(name, "hicache-") {
			any = true
		}
	}
	if !any {
		return nil
	}
	if p.HiCache == nil {
		if h.enable {
			return fmt.Errorf("--enable-hierarchical-cache: profile %q has no hicache section with the model's KV shape and the "+
				"transfer costs (sglmock profiles --fields lists them)", p.Name)
		}
		p.HiCache = &HiCache{}
	} else {
		c := *p.HiCache // the caller's profile may share the original
		p.HiCache = &c
	}
	c := p.HiCache
	if set["enable-hierarchical-cache"] {
		c.Enable = h.enable
	}
	if set["hicache-ratio"] {
		c.Ratio = h.ratio
	}
	if set["hicache-size"] {
		c.SizeGB = h.sizeGB
	}
	for _, s := range []struct {
		flag string
		dst  *string
		v    string
	}{
		{"hicache-write-policy", &c.WritePolicy, h.writePolicy},
		{"hicache-io-backend", &c.IOBackend, h.ioBackend},
		{"hicache-mem-layout", &c.MemLayout, h.memLayout},
		{"hicache-storage-backend", &c.StorageBackend, h.storageBackend},
		{"hicache-storage-prefetch-policy", &c.PrefetchPolicy, h.prefetchPolicy},
		{"hicache-storage-backend-extra-config", &c.StorageExtraConfig, h.extraCf},
	} {
		if set[s.flag] {
			*s.dst = s.v
		}
	}
	return nil
}
