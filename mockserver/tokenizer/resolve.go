package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
)

// Resolve finds the local directory of a model path as SGLang's loader
// does offline: the path itself when it is a directory, else, for a
// Hugging Face model id ("org/name"), its snapshot in the local Hugging
// Face cache ($HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub):
// the revision refs/main names, else the only snapshot. ok is false when
// there is none.
func Resolve(path string) (dir string, ok bool) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return path, true
	}
	org, name, found := strings.Cut(path, "/")
	if !found || org == "" || name == "" || strings.Contains(name, "/") || filepath.IsAbs(path) || strings.HasPrefix(path, ".") {
		return "", false
	}
	repo := filepath.Join(hubCache(), "models--"+org+"--"+name)
	if ref, err := os.ReadFile(filepath.Join(repo, "refs", "main")); err == nil {
		snap := filepath.Join(repo, "snapshots", strings.TrimSpace(string(ref)))
		if st, err := os.Stat(snap); err == nil && st.IsDir() {
			return snap, true
		}
	}
	snaps, err := os.ReadDir(filepath.Join(repo, "snapshots"))
	if err != nil || len(snaps) != 1 || !snaps[0].IsDir() {
		return "", false
	}
	return filepath.Join(repo, "snapshots", snaps[0].Name()), true
}

// hubCache is the Hugging Face hub cache directory.
func hubCache() string {
	if d := os.Getenv("HF_HUB_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("HF_HOME"); d != "" {
		return filepath.Join(d, "hub")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".cache", "huggingface", "hub")
}
