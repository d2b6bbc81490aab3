package hicache

import (
	"container/list"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/sglmock/sglmock/radixcache"
)

// Store is a storage backend: which pages it holds.
type Store interface {
	// Exists reports whether the page with key is stored.
	Exists(key string) (bool, error)
	// Put stores the page with key, if it is not stored already.
	Put(key string) error
	// Clear removes every page.
	Clear() error
	// Class is the backend's class name in SGLang, which
	// cached_tokens_details and the cache_source label report
	// ("HiCacheFile", "MooncakeStore", ...).
	Class() string
}

// Key is a page's storage key: its digest in hex (SGLang's
// get_hash_str).
func Key(d radixcache.Digest) string { return hex.EncodeToString(d[:]) }

// Classes maps SGLang's --hicache-storage-backend names to the class
// StorageBackendFactory builds for each; memory is the mock's own.
var Classes = map[string]string{
	"file":     "HiCacheFile",
	"mooncake": "MooncakeStore",
	"hf3fs":    "HiCacheHF3FS",
	"nixl":     "HiCacheNixl",
	"aibrix":   "AibrixKVCacheStorage",
	"eic":      "EICStorage",
	"simm":     "HiCacheSiMM",
	"dynamic":  "DynamicBackend",
	"memory":   "MockMemoryStorage",
}

// ZeroCopy reports whether SGLang's controller moves a backend's pages a
// batch at a time (its zero-copy page_get/page_set for hf3fs, mooncake,
// eic, nixl and simm), which the in-process stand-in for them does too;
// the others (file) go page by page.
func ZeroCopy(backend string) bool {
	switch backend {
	case "hf3fs", "mooncake", "eic", "nixl", "simm", "memory":
		return true
	}
	return false
}

// MemoryPages is how many pages the in-process store keeps: a distributed
// store (Mooncake, 3FS) has a capacity, and a server that runs for days
// must not hold every page it ever wrote. Past it, the least recently
// used page goes, and a prefetch no longer finds it. Some 150 MB of keys.
const MemoryPages = 1 << 20

// Memory is the in-process store: at most its capacity of pages, the least
// recently used evicted first.
type Memory struct {
	class    string
	capacity int
	mu       sync.Mutex
	pages    map[string]*list.Element // of the key
	order    list.List                // most recently used first
}

// NewMemory returns an empty in-process store of capacity pages (at least
// one) that reports class.
func NewMemory(class string, capacity int) *Memory {
	return &Memory{class: class, capacity: max(1, capacity), pages: make(map[string]*list.Element)}
}

// Exists reports whether key is stored; a lookup uses it.
func (m *Memory) Exists(key string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.pages[key]
	if ok {
		m.order.MoveToFront(el)
	}
	return ok, nil
}

// Put stores key, evicting the least recently used page when full.
func (m *Memory) Put(key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.pages[key]; ok {
		m.order.MoveToFront(el)
		return nil
	}
	if len(m.pages) >= m.capacity {
		last := m.order.Back()
		m.order.Remove(last)
		delete(m.pages, last.Value.(string))
	}
	m.pages[key] = m.order.PushFront(key)
	return nil
}

func (m *Memory) Clear() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.pages)
	m.order.Init()
	return nil
}

func (m *Memory) Class() string { return m.class }

// Len is the number of pages stored.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.pages)
}

// File is SGLang's HiCacheFile: a directory of page files.
type File struct {
	dir    string
	suffix string
}

// FileSuffix is what HiCacheFile appends to a key: the model name with its
// slashes turned into dashes, and the tensor-parallel rank and size unless
// the model is MLA's.
func FileSuffix(model string, tpRank, tpSize int, mla bool) string {
	s := "_" + strings.Join(strings.Split(model, "/"), "-")
	if !mla {
		s += fmt.Sprintf("_%d_%d", tpRank, tpSize)
	}
	return s
}

// NewFile opens the page directory dir for model, creating it when it is
// missing, as HiCacheFile does on rank 0. Its pages are those of
// tensor-parallel rank 0 of tpSize, the attention group's size that
// HiCacheStorageConfig carries (the mock runs one process a DP rank).
func NewFile(dir, model string, tpSize int, mla bool) (*File, error) {
	if dir == "" {
		return nil, errors.New("hicache: the file backend needs a directory")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("hicache: file backend: %w", err)
	}
	return &File{dir: dir, suffix: FileSuffix(model, 0, max(tpSize, 1), mla)}, nil
}

// Dir is the page directory.
func (f *File) Dir() string { return f.dir }

// Path is the file of the page with key.
func (f *File) Path(key string) string { return filepath.Join(f.dir, key+f.suffix+".bin") }

func (f *File) Exists(key string) (bool, error) {
	_, err := os.Stat(f.Path(key))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, err
}

// pageHeader begins every page file: the mock writes no KV, only what
// names the page.
const pageHeader = "sglmock hicache page "

func (f *File) Put(key string) error {
	if ok, err := f.Exists(key); ok || err != nil {
		return err
	}
	return os.WriteFile(f.Path(key), []byte(pageHeader+key+"\n"), 0o644)
}

// Clear removes every file of the directory (HiCacheFile.clear), pages of
// other models included; subdirectories stay.
func (f *File) Clear() error {
	entries, err := os.ReadDir(f.dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Type().IsRegular() {
			if err := os.Remove(filepath.Join(f.dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

func (f *File) Class() string { return Classes["file"] }
