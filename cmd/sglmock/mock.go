package main

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/engine"
	"github.com/sglmock/sglmock/mockserver/profile"
)

// localMock is an sglmock server on a free loopback port, in this process,
// with an empty cache (no warmup request): what demo and audit run against.
type localMock struct {
	srv     *api.Server
	hs      *http.Server
	URL     string // http://127.0.0.1:PORT
	Port    int
	cleanup func() // removes a private HiCache page directory
}

// startLocalMock starts a mock of profile p at the given speedup.
func startLocalMock(p *profile.Profile, speedup float64, cfg api.Config) (*localMock, error) {
	return startLocalMockAt("127.0.0.1:0", p, speedup, cfg)
}

// startLocalMockAt starts it at addr (HOST:PORT; port 0 for a free one).
func startLocalMockAt(addr string, p *profile.Profile, speedup float64, cfg api.Config) (*localMock, error) {
	cfg.Profile, cfg.Speedup, cfg.SpinWindow = p, speedup, engine.DefaultSpinWindow
	cfg.ReadHeaderTimeout, cfg.IdleTimeout, cfg.BodyTimeout = 30*time.Second, 5*time.Second, 60*time.Second
	cleanup := func() {}
	if h := p.HiCacheConfig(); h != nil && h.StorageBackend == "file" && cfg.HiCacheStorageDir == "" {
		dir, rm, err := privateStorageDir()
		if err != nil {
			return nil, err
		}
		cfg.HiCacheStorageDir, cleanup = dir, rm
	}
	srv, err := api.New(cfg)
	if err != nil {
		cleanup()
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		srv.Close()
		cleanup()
		return nil, err
	}
	srv.MarkReady()
	hs := srv.HTTPServer()
	go hs.Serve(ln)
	port := ln.Addr().(*net.TCPAddr).Port
	return &localMock{srv: srv, hs: hs, URL: "http://" + ln.Addr().String(), Port: port, cleanup: cleanup}, nil
}

// Close aborts what still runs and stops the server and the engine.
func (m *localMock) Close() {
	m.srv.BeginShutdown()
	m.srv.Engine().AbortAll()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := m.hs.Shutdown(ctx); err != nil {
		m.hs.Close()
	}
	m.srv.Close()
	m.cleanup()
}
