package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// Runner sends requests through the endpoint picker to the fleet, and to
// a replica directly where an experiment needs it.
type Runner struct {
	EPP      extprocv3.ExternalProcessorClient
	HTTP     *http.Client
	Model    string
	Replicas []string // host:port, the endpoints file's order
	// Settle is the pause after each request, in which its KV events reach
	// the picker's index (and a flush's AllBlocksCleared).
	Settle time.Duration
	Log    io.Writer // one line per request
	seq    int
}

// Send is one request and where it went.
type Send struct {
	Prompt        int
	Replica       string
	Repeat        bool // the prompt was sent before
	Holder        bool // the replica had served the prompt before
	PromptTokens  int
	CachedTokens  int
	Latency       time.Duration // the picker's decision
	Scores        map[string]float64
	ThroughPicker bool
	CacheReported bool // usage.prompt_tokens_details was there
}

// usage is the part of an OpenAI response the experiments read
// (cached_tokens needs --enable-cache-report).
type usage struct {
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

func (r *Runner) post(ctx context.Context, endpoint, path string, body []byte) (Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+endpoint+path, bytes.NewReader(body))
	if err != nil {
		return Response{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.HTTP.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return Response{}, err
	}
	return Response{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: b}, nil
}

// send sends body to path: through the picker, or to replica directly
// when it is not empty.
func (r *Runner) send(ctx context.Context, prompt int, path string, body []byte, replica string) (Send, error) {
	r.seq++
	s := Send{Prompt: prompt}
	var resp Response
	if replica == "" {
		d, err := Exchange(ctx, r.EPP, fmt.Sprintf("eppcheck-%d", r.seq), path, body, r.post)
		if err != nil {
			return s, err
		}
		s.Replica, s.Latency, s.Scores, s.ThroughPicker, resp = d.Endpoint, d.Latency, d.Scores, true, d.Response
	} else {
		var err error
		if resp, err = r.post(ctx, replica, path, body); err != nil {
			return s, err
		}
		s.Replica = replica
	}
	if resp.Status != http.StatusOK {
		return s, fmt.Errorf("%s %s: %d %s", s.Replica, path, resp.Status, bytes.TrimSpace(resp.Body))
	}
	var u usage
	if err := json.Unmarshal(resp.Body, &u); err != nil {
		return s, fmt.Errorf("%s %s: %w", s.Replica, path, err)
	}
	// SGLang reports cached tokens only under --enable-cache-report, and
	// only when there are some.
	s.PromptTokens = u.Usage.PromptTokens
	if d := u.Usage.PromptTokensDetails; d != nil {
		s.CachedTokens, s.CacheReported = d.CachedTokens, true
	}
	if r.Log != nil {
		how := "direct"
		if s.ThroughPicker {
			how = fmt.Sprintf("picked in %s, scores %s", s.Latency.Round(100*time.Microsecond), formatScores(s.Scores))
		}
		fmt.Fprintf(r.Log, "  prompt %d -> %s: %d of %d tokens cached (%s)\n", prompt, s.Replica, s.CachedTokens, s.PromptTokens, how)
	}
	select {
	case <-time.After(r.Settle):
	case <-ctx.Done():
		return s, ctx.Err()
	}
	return s, nil
}

func formatScores(scores map[string]float64) string {
	if len(scores) == 0 {
		return "not emitted"
	}
	keys := make([]string, 0, len(scores))
	for k := range scores {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%.2f", k, scores[k])
	}
	return b.String()
}

func completion(model, prompt string) []byte {
	b, _ := json.Marshal(map[string]any{"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0})
	return b
}

// Route sends each prompt sends times, in an order shuffled by seed,
// through the picker, and records whether each repeat went to a replica
// that had already served the prompt.
func (r *Runner) Route(ctx context.Context, prompts []string, sends int, seed uint64) ([]Send, error) {
	order := make([]int, 0, len(prompts)*sends)
	for p := range prompts {
		for range sends {
			order = append(order, p)
		}
	}
	rng := rand.New(rand.NewPCG(seed, 0))
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	holders := make([]map[string]bool, len(prompts))
	var out []Send
	for _, p := range order {
		s, err := r.send(ctx, p, "/v1/completions", completion(r.Model, prompts[p]), "")
		if err != nil {
			return out, err
		}
		s.Repeat, s.Holder = holders[p] != nil, holders[p][s.Replica]
		if holders[p] == nil {
			holders[p] = map[string]bool{}
		}
		holders[p][s.Replica] = true
		out = append(out, s)
	}
	return out, nil
}

// RouteFigures sum up a routing run.
type RouteFigures struct {
	Requests, Repeats, RepeatHits    int
	RepeatPromptTokens, RepeatCached int
	FirstPromptTokens, FirstCached   int
	FirstPerReplica                  map[string]int
	LatencyMedian, LatencyMax        time.Duration
	Replicas                         int
	CacheReported                    bool // some response reported cached tokens
}

// HitFraction is the share of repeats routed to a replica that held the
// prompt.
func (f RouteFigures) HitFraction() float64 { return ratio(f.RepeatHits, f.Repeats) }

// CachedShare is the share of the repeats' prompt tokens served from the
// cache.
func (f RouteFigures) CachedShare() float64 { return ratio(f.RepeatCached, f.RepeatPromptTokens) }

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func routeFigures(sends []Send, replicas int) RouteFigures {
	f := RouteFigures{Requests: len(sends), FirstPerReplica: map[string]int{}, Replicas: replicas}
	var lat []time.Duration
	for _, s := range sends {
		lat = append(lat, s.Latency)
		f.CacheReported = f.CacheReported || s.CacheReported
		if !s.Repeat {
			f.FirstPromptTokens += s.PromptTokens
			f.FirstCached += s.CachedTokens
			f.FirstPerReplica[s.Replica]++
			continue
		}
		f.Repeats++
		if s.Holder {
			f.RepeatHits++
		}
		f.RepeatPromptTokens += s.PromptTokens
		f.RepeatCached += s.CachedTokens
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		f.LatencyMedian, f.LatencyMax = lat[len(lat)/2], lat[len(lat)-1]
	}
	return f
}

func (f RouteFigures) print(w io.Writer) {
	fmt.Fprintf(w, "requests: %d, repeats: %d\n", f.Requests, f.Repeats)
	fmt.Fprintf(w, "repeat hit fraction: %d/%d = %.3f (a random pick over %d replicas: %.3f)\n",
		f.RepeatHits, f.Repeats, f.HitFraction(), f.Replicas, 1/float64(max(f.Replicas, 1)))
	fmt.Fprintf(w, "cached share on repeats: %d of %d prompt tokens = %.1f %%\n", f.RepeatCached, f.RepeatPromptTokens, 100*f.CachedShare())
	if !f.CacheReported {
		fmt.Fprintln(w, "  no response reported cached tokens: start the fleet with --enable-cache-report")
	}
	fmt.Fprintf(w, "cached on first sends: %d of %d prompt tokens\n", f.FirstCached, f.FirstPromptTokens)
	keys := make([]string, 0, len(f.FirstPerReplica))
	for k := range f.FirstPerReplica {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %d", k, f.FirstPerReplica[k]))
	}
	fmt.Fprintf(w, "first sends per replica: %s\n", strings.Join(parts, ", "))
	fmt.Fprintf(w, "picker decision (request headers to the last body response): median %s, max %s\n",
		f.LatencyMedian.Round(100*time.Microsecond), f.LatencyMax.Round(100*time.Microsecond))
}

// FlushFigures are the flush check's: every prompt held by two replicas,
// one of them (Flushed) then flushed.
type FlushFigures struct {
	Flushed                        string
	Before, BeforeToHolder         int
	After, AfterToSurvivor         int
	AfterToFlushed                 int
	AfterCachedMin, AfterCachedMax int
	BeforeScores, AfterScores      []map[string]float64
}

// Flush places each prompt on two replicas, the first replica of the
// fleet among them (through the picker, then directly to the one of the
// two it did not pick), probes each through the picker, flushes that
// replica (POST /flush_cache: AllBlocksCleared), and probes each probes
// times more. A picker that follows the flush sends every later probe to
// the surviving holder.
func (r *Runner) Flush(ctx context.Context, prompts []string, probes int) (FlushFigures, error) {
	if len(r.Replicas) < 2 {
		return FlushFigures{}, fmt.Errorf("the flush check needs two replicas, the fleet has %d", len(r.Replicas))
	}
	f := FlushFigures{Flushed: r.Replicas[0]}
	survivor := make([]string, len(prompts))
	for p, text := range prompts {
		body := completion(r.Model, text)
		s, err := r.send(ctx, p, "/v1/completions", body, "")
		if err != nil {
			return f, err
		}
		second := f.Flushed
		if s.Replica == f.Flushed {
			second = r.Replicas[1]
		}
		if _, err := r.send(ctx, p, "/v1/completions", body, second); err != nil {
			return f, err
		}
		survivor[p] = s.Replica
		if s.Replica == f.Flushed {
			survivor[p] = second
		}
	}
	for p, text := range prompts {
		s, err := r.send(ctx, p, "/v1/completions", completion(r.Model, text), "")
		if err != nil {
			return f, err
		}
		f.Before++
		if s.Replica == f.Flushed || s.Replica == survivor[p] {
			f.BeforeToHolder++
		}
		f.BeforeScores = append(f.BeforeScores, s.Scores)
	}
	resp, err := r.post(ctx, f.Flushed, "/flush_cache", nil)
	if err != nil {
		return f, err
	}
	if resp.Status != http.StatusOK {
		return f, fmt.Errorf("POST %s/flush_cache: %d %s", f.Flushed, resp.Status, resp.Body)
	}
	if r.Log != nil {
		fmt.Fprintf(r.Log, "  flushed %s\n", f.Flushed)
	}
	select {
	case <-time.After(r.Settle):
	case <-ctx.Done():
		return f, ctx.Err()
	}
	f.AfterCachedMin = -1
	for range probes {
		for p, text := range prompts {
			s, err := r.send(ctx, p, "/v1/completions", completion(r.Model, text), "")
			if err != nil {
				return f, err
			}
			f.After++
			switch s.Replica {
			case survivor[p]:
				f.AfterToSurvivor++
			case f.Flushed:
				f.AfterToFlushed++
			}
			if f.AfterCachedMin < 0 || s.CachedTokens < f.AfterCachedMin {
				f.AfterCachedMin = s.CachedTokens
			}
			f.AfterCachedMax = max(f.AfterCachedMax, s.CachedTokens)
			f.AfterScores = append(f.AfterScores, s.Scores)
		}
	}
	return f, nil
}

func (f FlushFigures) print(w io.Writer) {
	fmt.Fprintf(w, "before the flush: %d/%d probes to a holder (each prompt held by %s and one other replica)\n",
		f.BeforeToHolder, f.Before, f.Flushed)
	if len(f.BeforeScores) > 0 {
		fmt.Fprintf(w, "  scores of the first probe: %s\n", formatScores(f.BeforeScores[0]))
	}
	fmt.Fprintf(w, "after flushing %s: %d/%d probes to the surviving holder, %d/%d to the flushed replica; cached tokens %d..%d\n",
		f.Flushed, f.AfterToSurvivor, f.After, f.AfterToFlushed, f.After, f.AfterCachedMin, f.AfterCachedMax)
	if len(f.AfterScores) > 0 {
		fmt.Fprintf(w, "  scores of the first probe: %s\n", formatScores(f.AfterScores[0]))
	}
}

// ChatFigures are the chat check's: one conversation sent sends times.
type ChatFigures struct {
	Sends []Send
}

// Chat sends one system-and-user conversation through the picker sends
// times: the picker renders it through a replica's chat render endpoint,
// and its block keys must be the replica's own for the repeats to stay.
func (r *Runner) Chat(ctx context.Context, system, user string, sends int) (ChatFigures, error) {
	body, _ := json.Marshal(map[string]any{"model": r.Model, "max_tokens": 1, "temperature": 0,
		"messages": []map[string]string{{"role": "system", "content": system}, {"role": "user", "content": user}}})
	var f ChatFigures
	for range sends {
		s, err := r.send(ctx, 0, "/v1/chat/completions", body, "")
		if err != nil {
			return f, err
		}
		f.Sends = append(f.Sends, s)
	}
	return f, nil
}

// Pinned reports whether every repeat went where the first send went.
func (f ChatFigures) Pinned() bool {
	for _, s := range f.Sends[1:] {
		if s.Replica != f.Sends[0].Replica {
			return false
		}
	}
	return len(f.Sends) > 1
}

func (f ChatFigures) print(w io.Writer) {
	for i, s := range f.Sends {
		fmt.Fprintf(w, "chat send %d: %s, %d of %d tokens cached\n", i+1, s.Replica, s.CachedTokens, s.PromptTokens)
	}
}

// Prompts makes n distinct prompts of words words each, from seed: each
// begins with its own marker, so no two share their first page.
func Prompts(n, words int, seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		fmt.Fprintf(&b, "Record %s%s:", vocabulary[rng.IntN(len(vocabulary))], letters(i))
		for range words {
			b.WriteString(" ")
			b.WriteString(vocabulary[rng.IntN(len(vocabulary))])
		}
		out[i] = b.String()
	}
	return out
}

// letters spells i in base 26, a..z, aa, ab, ...
func letters(i int) string {
	s := ""
	for i++; i > 0; i = (i - 1) / 26 {
		s = string(rune('a'+(i-1)%26)) + s
	}
	return s
}

var vocabulary = strings.Fields(`time year people way day man thing woman life child world school state family
student group country problem hand part place case week company system program question work government
number night point home water room mother area money story fact month lot right study book eye job word
business issue side kind head house service friend father power hour game line end member law car city
community name president team minute idea kid body information back parent face others level office door
health person art war history party result change morning reason research girl guy moment air teacher
force education foot boy age policy process music market sense nation plan college interest death
experience effect class control care field development role effort rate heart drug show leader light
voice wife police mind price report decision son view relationship town road arm difference value
building action model season society tax director position player record paper space ground form event
official matter center couple site project activity star table need court oil situation cost industry
figure street image phone data picture practice piece land product doctor wall patient worker news test
movie north love support technology step baby computer type attention film tree source organization hair
window evidence population site river summer letter garden engine signal harbor valley winter bridge`)
