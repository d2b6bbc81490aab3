package hicache

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sglmock/sglmock/radixcache"
)

// HiCacheFile's file names: the key, the model with dashes for slashes,
// the rank and size unless MLA, ".bin".
func TestFileNames(t *testing.T) {
	for _, tc := range []struct {
		model string
		tp    int
		mla   bool
		want  string
	}{
		{"meta-llama/Llama-3.1-8B-Instruct", 1, false, "k_meta-llama-Llama-3.1-8B-Instruct_0_1.bin"},
		{"meta-llama/Llama-3.1-8B-Instruct", 2, false, "k_meta-llama-Llama-3.1-8B-Instruct_0_2.bin"},
		{"moonshotai/Kimi-K2.6", 8, true, "k_moonshotai-Kimi-K2.6.bin"},
	} {
		dir := t.TempDir()
		f, err := NewFile(dir, tc.model, tc.tp, tc.mla)
		if err != nil {
			t.Fatal(err)
		}
		if got := filepath.Base(f.Path("k")); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.model, got, tc.want)
		}
	}
}

// A page put in one File is found by another on the same directory (a
// second server, or the same one restarted); Clear removes every file.
func TestFileSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	a, err := NewFile(filepath.Join(dir, "pages"), "m/x", 1, false)
	if err != nil {
		t.Fatal(err)
	}
	key := Key(radixcache.Digest(sha256.Sum256([]byte("page"))))
	if err := a.Put(key); err != nil {
		t.Fatal(err)
	}
	b, err := NewFile(filepath.Join(dir, "pages"), "m/x", 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := b.Exists(key); !ok || err != nil {
		t.Fatalf("reopened: Exists = %v, %v; want true", ok, err)
	}
	other, _ := NewFile(filepath.Join(dir, "pages"), "m/y", 1, false)
	if ok, _ := other.Exists(key); ok {
		t.Fatal("another model's server found the page")
	}
	os.WriteFile(filepath.Join(dir, "pages", "stray.txt"), []byte("x"), 0o644)
	if err := b.Clear(); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "pages"))
	if len(entries) != 0 {
		t.Fatalf("after Clear: %d files left", len(entries))
	}
	if ok, _ := a.Exists(key); ok {
		t.Fatal("after Clear the page still exists")
	}
}

func TestMemory(t *testing.T) {
	m := NewMemory("MooncakeStore")
	m.Put("a")
	m.Put("a")
	m.Put("b")
	if m.Len() != 2 {
		t.Fatalf("Len: got %d, want 2", m.Len())
	}
	if ok, _ := m.Exists("a"); !ok {
		t.Fatal("a missing")
	}
	m.Clear()
	if ok, _ := m.Exists("a"); ok || m.Len() != 0 {
		t.Fatal("Clear left pages")
	}
	if !slices.Contains([]string{"MooncakeStore"}, m.Class()) {
		t.Fatal(m.Class())
	}
}
