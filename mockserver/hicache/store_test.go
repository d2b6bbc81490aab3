package hicache

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
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
	other, err := NewFile(filepath.Join(dir, "pages"), "m/y", 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := other.Exists(key); ok || err != nil {
		t.Fatalf("another model's server: Exists = %v, %v; want false, nil", ok, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pages", "stray.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "pages", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := b.Clear(); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "pages"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "sub" {
		t.Fatalf("after Clear: %v left, want the subdirectory only", entries)
	}
	if ok, err := a.Exists(key); ok || err != nil {
		t.Fatalf("after Clear: Exists = %v, %v; want false, nil", ok, err)
	}
}

func TestMemory(t *testing.T) {
	m := NewMemory("MooncakeStore", MemoryPages)
	for _, k := range []string{"a", "a", "b"} {
		if err := m.Put(k); err != nil {
			t.Fatal(err)
		}
	}
	if m.Len() != 2 {
		t.Fatalf("Len: got %d, want 2", m.Len())
	}
	if ok, err := m.Exists("a"); !ok || err != nil {
		t.Fatalf("Exists(a) = %v, %v; want true, nil", ok, err)
	}
	if err := m.Clear(); err != nil {
		t.Fatal(err)
	}
	if ok, err := m.Exists("a"); ok || err != nil || m.Len() != 0 {
		t.Fatalf("after Clear: Exists(a) = %v, %v, Len %d; want false, nil, 0", ok, err, m.Len())
	}
	if got := m.Class(); got != "MooncakeStore" {
		t.Fatalf("Class: got %s, want MooncakeStore", got)
	}
}

// The in-process store keeps at most its capacity: past it, the least
// recently used page goes (a lookup uses a page), and the store never
// holds more than its capacity however many pages are written.
func TestMemoryEvictsTheLeastRecentlyUsed(t *testing.T) {
	m := NewMemory("MooncakeStore", 3)
	for _, k := range []string{"a", "b", "c"} {
		m.Put(k)
	}
	m.Exists("a") // a is used: b is now the least recent
	m.Put("d")
	var got []string
	for _, k := range []string{"a", "b", "c", "d"} {
		if ok, _ := m.Exists(k); ok {
			got = append(got, k)
		}
	}
	if fmt.Sprint(got) != "[a c d]" || m.Len() != 3 {
		t.Fatalf("after a, b, c, a used, d: stored %v (%d pages), want [a c d] (3)", got, m.Len())
	}
	for i := range 1000 {
		m.Put(fmt.Sprint("k", i))
	}
	if m.Len() != 3 {
		t.Fatalf("after 1000 more pages: %d stored, want the capacity, 3", m.Len())
	}
}
