package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// runHealth asks a server's /health and exits 0 when it answers 200. It is
// the container image's health check: the image holds nothing but the
// binary, so there is no shell or curl to ask with.
func runHealth(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sglmock health", flag.ContinueOnError)
	fs.SetOutput(stderr)
	host := fs.String("host", "127.0.0.1", "the server's address")
	port := fs.Int("port", 30000, "the server's port")
	timeout := fs.Duration("timeout", 2*time.Second, "longest wait for the answer (wall time)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: sglmock health [flags]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Asks a server's /health; exits 0 when it answers 200 (serving), 1 otherwise")
		fmt.Fprintln(stderr, "(starting, shutting down, or not there). The container image's health check.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if exit, done := flagExit("health", parseFlags(fs, args, false), stderr); done {
		return exit
	}
	switch {
	case *port < 1 || *port > 65535:
		fmt.Fprintf(stderr, "sglmock health: --port %d: must be in 1..65535\n", *port)
		return 2
	case *timeout <= 0:
		fmt.Fprintf(stderr, "sglmock health: --timeout %v: must be > 0\n", *timeout)
		return 2
	}
	url := "http://" + net.JoinHostPort(*host, strconv.Itoa(*port)) + "/health"
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	status, err := getStatus(ctx, url)
	if err != nil {
		fmt.Fprintln(stderr, "sglmock health:", err)
		return 1
	}
	if status != http.StatusOK {
		fmt.Fprintf(stderr, "sglmock health: %s answered %d %s\n", url, status, http.StatusText(status))
		return 1
	}
	fmt.Fprintln(stdout, "healthy:", url)
	return 0
}

// getStatus returns the status code of a GET on url.
func getStatus(ctx context.Context, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	// A fresh transport: no proxy from the environment, no idle connection
	// left behind.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
