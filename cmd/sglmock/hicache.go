package main

import (
	"os"
)

// hicacheDirEnv is SGLang's variable for the file storage backend's
// directory; without it HiCacheFile uses defaultHiCacheDir.
const (
	hicacheDirEnv     = "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"
	defaultHiCacheDir = "/tmp/hicache"
)

// hicacheStorageDir is where serve's file storage backend keeps its pages,
// as SGLang's: $SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR, else /tmp/hicache.
// They outlive the server, as SGLang's do.
func hicacheStorageDir() string {
	if d := os.Getenv(hicacheDirEnv); d != "" {
		return d
	}
	return defaultHiCacheDir
}

// privateStorageDir is the page directory of a mock a command starts for
// itself (audit, scenario, demo): $SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR
// when set, else a fresh directory that cleanup removes, so that pages a
// past run left cannot reach this one.
func privateStorageDir() (dir string, cleanup func(), err error) {
	if d := os.Getenv(hicacheDirEnv); d != "" {
		return d, func() {}, nil
	}
	d, err := os.MkdirTemp("", "sglmock-hicache-")
	if err != nil {
		return "", nil, err
	}
	return d, func() { os.RemoveAll(d) }, nil
}
