package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	a := flag.String("a", "", "server A's base URL (sglmock)")
	b := flag.String("b", "", "server B's base URL (the one compared with)")
	path := flag.String("path", "/v1/completions", "the request's path")
	words := flag.Int("words", 100, "words in the prompt")
	maxTokens := flag.Int("max-tokens", 16, "max_tokens")
	stream := flag.Bool("stream", false, `send "stream": true`)
	ignoreEOS := flag.Bool("ignore-eos", false, `send "ignore_eos": true: every answer max_tokens long`)
	model := flag.String("model", "m", "the model name sent")
	c := flag.Int("c", 64, "clients (connections), each with one request at a time")
	n := flag.Int("n", 3200, "requests a round to each server")
	rounds := flag.Int("rounds", 5, "rounds to each server, alternating")
	pidA := flag.Int("pid-a", 0, "server A's process id, for its CPU time per request")
	pidB := flag.Int("pid-b", 0, "server B's process id")
	flag.Parse()
	if *a == "" || *b == "" || *c < 1 || *n < 1 || *rounds < 1 {
		fmt.Fprintln(os.Stderr, "sidebyside: -a and -b are required; -c, -n and -rounds must be at least 1")
		os.Exit(2)
	}
	body := requestBody(*model, prompt(*words), *maxTokens, *stream, *ignoreEOS)
	servers := make([]server, 2)
	for i, base := range []string{*a, *b} {
		s, err := newServer(base, *path, body)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sidebyside:", err)
			os.Exit(2)
		}
		servers[i] = s
	}
	servers[0].pid, servers[1].pid = *pidA, *pidB
	// A warm-up round of 4c requests to each.
	for _, s := range servers {
		if _, err := s.load(4**c, *c); err != nil {
			fmt.Fprintln(os.Stderr, "sidebyside:", err)
			os.Exit(1)
		}
	}
	var rps [2][]float64
	var cpu [2][]float64
	var ratios, cpuRatios []float64
	for r := range *rounds {
		var got [2]float64
		for i, s := range servers {
			before := cpuSeconds(s.pid)
			x, err := s.load(*n, *c)
			if err != nil {
				fmt.Fprintln(os.Stderr, "sidebyside:", err)
				os.Exit(1)
			}
			got[i] = x
			rps[i] = append(rps[i], x)
			cpu[i] = append(cpu[i], (cpuSeconds(s.pid)-before)*1e6/float64(*n))
		}
		ratios = append(ratios, got[0]/got[1])
		if a, b := cpu[0][r], cpu[1][r]; a > 0 && b > 0 {
			cpuRatios = append(cpuRatios, b/a)
		}
		fmt.Fprintf(os.Stderr, "round %d: A %.0f requests/s, B %.0f, %.2fx\n", r+1, got[0], got[1], got[0]/got[1])
	}
	fmt.Printf("words=%d max_tokens=%d stream=%v ignore_eos=%v c=%d: A %.0f requests/s, B %.0f, ratio %.2fx (median of %d rounds; %.2f-%.2f)",
		*words, *maxTokens, *stream, *ignoreEOS, *c, median(rps[0]), median(rps[1]), median(ratios), *rounds, slices.Min(ratios), slices.Max(ratios))
	if len(cpuRatios) > 0 {
		fmt.Printf("; server CPU A %.0f µs/request, B %.0f, B/A %.2fx", median(cpu[0]), median(cpu[1]), median(cpuRatios))
	}
	fmt.Println()
}

// prompt is words words from a fixed list, always the same text.
func prompt(words int) string {
	vocab := strings.Fields("the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches near river banks")
	var sb strings.Builder
	for i := range words {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(vocab[(i*7+i/3)%len(vocab)])
	}
	return sb.String()
}

func requestBody(model, prompt string, maxTokens int, stream, ignoreEOS bool) string {
	body := fmt.Sprintf(`{"model": %q, "prompt": %q, "max_tokens": %d, "stream": %v`, model, prompt, maxTokens, stream)
	if ignoreEOS {
		body += `, "ignore_eos": true`
	}
	return body + "}"
}

// server is one side: where to connect, the request's bytes, its process.
type server struct {
	host string
	req  []byte
	pid  int
}

func newServer(base, path, body string) (server, error) {
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return server{}, fmt.Errorf("%q: want a base URL such as http://127.0.0.1:30000", base)
	}
	req := fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		path, u.Host, len(body), body)
	return server{host: u.Host, req: req}, nil
}

// load sends n requests from c clients, each on a connection of its own,
// and returns the requests/s.
func (s server) load(n, c int) (float64, error) {
	conns := make([]*conn, c)
	for i := range conns {
		nc, err := net.Dial("tcp", s.host)
		if err != nil {
			return 0, err
		}
		conns[i] = newConn(nc)
		defer nc.Close()
	}
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for _, cn := range conns {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				status, err := cn.roundTrip(s.req)
				if err == nil && status != 200 {
					err = fmt.Errorf("%s: status %d", s.host, status)
				}
				if err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		return 0, *err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// conn is a keep-alive HTTP/1.1 connection.
type conn struct {
	w io.Writer
	r *bufio.Reader
}

func newConn(c io.ReadWriter) *conn { return &conn{w: c, r: bufio.NewReaderSize(c, 64<<10)} }

// roundTrip writes req and reads one whole response, returning its status.
func (c *conn) roundTrip(req []byte) (int, error) {
	if _, err := c.w.Write(req); err != nil {
		return 0, err
	}
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	parts := bytes.Fields(line) // HTTP/1.1 200 OK
	if len(parts) < 2 {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	status, err := strconv.Atoi(string(parts[1]))
	if err != nil {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	length, chunked := -1, false
	for {
		h, err := c.r.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		k, v, _ := bytes.Cut(h, []byte(":"))
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(v)); err != nil {
				return 0, fmt.Errorf("bad Content-Length %q", v)
			}
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(v, []byte("chunked"))
		}
	}
	switch {
	case chunked:
		for {
			l, err := c.r.ReadSlice('\n')
			if err != nil {
				return 0, err
			}
			size, err := strconv.ParseInt(string(bytes.TrimRight(l, "\r\n")), 16, 64)
			if err != nil {
				return 0, fmt.Errorf("bad chunk size %q", l)
			}
			if _, err := c.r.Discard(int(size) + 2); err != nil { // the chunk and its CRLF
				return 0, err
			}
			if size == 0 {
				return status, nil
			}
		}
	case length >= 0:
		if _, err := c.r.Discard(length); err != nil {
			return 0, err
		}
		return status, nil
	}
	return 0, errors.New("a response with neither Content-Length nor chunks")
}

// cpuSeconds is process pid's user and system CPU time (0 for pid 0 or
// where /proc cannot tell).
func cpuSeconds(pid int) float64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(fields) < 13 {
		return 0
	}
	user, _ := strconv.ParseFloat(fields[11], 64)
	system, _ := strconv.ParseFloat(fields[12], 64)
	return (user + system) / 100 // USER_HZ
}

func median(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	return s[len(s)/2]
}
