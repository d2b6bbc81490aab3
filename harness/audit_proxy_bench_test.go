package harness_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sglmock/sglmock/harness"
)

// BenchmarkProxyStream measures what the recording proxy adds to a stream
// over loopback: each iteration fetches a 64-event /generate stream
// straight from the server, through a plain reverse proxy (the hop alone),
// and through the recording proxy, and reports the ratios of their times
// and the microseconds each proxy adds to the first event and to the
// whole request.
func BenchmarkProxyStream(b *testing.B) {
	const events = 64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range events {
			fmt.Fprintf(w, `data: {"text": "%s", "meta_info": {"id": "r", "prompt_tokens": 1000, "completion_tokens": %d, "cached_tokens": 999}}`+"\n\n",
				strings.Repeat("word ", i+1), i+1)
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	defer upstream.Close()
	rec, err := harness.NewRecorder(upstream.URL, nil)
	if err != nil {
		b.Fatal(err)
	}
	proxy := httptest.NewServer(rec)
	defer proxy.Close()
	u, _ := url.Parse(upstream.URL)
	// The hop alone: a reverse proxy that, as the recorder does, reads the
	// request body before forwarding it (net/http's server may discard
	// what is left of a body once the answer starts, under the
	// transport's feet).
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }, FlushInterval: -1}
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
		rp.ServeHTTP(w, r)
	}))
	defer plain.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	body := `{"text": "` + strings.Repeat("prompt ", 1000) + `", "stream": true}`
	fetch := func(base string) (first, total time.Duration) {
		start := time.Now()
		resp, err := client.Post(base+"/generate", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		if _, err := br.ReadString('\n'); err != nil {
			b.Fatal(err)
		}
		first = time.Since(start)
		if _, err := io.Copy(io.Discard, br); err != nil {
			b.Fatal(err)
		}
		return first, time.Since(start)
	}
	// Each iteration fetches from all three, in an order that turns, so
	// that none always comes first or last.
	var total, first [3]time.Duration
	urls := [3]string{upstream.URL, plain.URL, proxy.URL}
	i := 0
	for b.Loop() {
		for k := range 3 {
			j := (i + k) % 3
			f, t := fetch(urls[j])
			first[j], total[j] = first[j]+f, total[j]+t
		}
		i++
	}
	direct, hop, recorded := total[0], total[1], total[2]
	directFirst, hopFirst, recordedFirst := first[0], first[1], first[2]
	us := func(d time.Duration) float64 { return float64(d) / float64(b.N) / 1e3 }
	b.ReportMetric(float64(recorded)/float64(direct), "recording/direct")
	b.ReportMetric(float64(recorded)/float64(hop), "recording/plain-proxy")
	b.ReportMetric(us(recordedFirst-directFirst), "us-added-first-event")
	b.ReportMetric(us(recordedFirst-hopFirst), "us-recording-adds-first-event")
	b.ReportMetric(us(recorded-hop), "us-recording-adds/request")
	b.ReportMetric(us(direct), "us-direct/request")
}
