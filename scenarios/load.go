package scenarios

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

// load is background traffic: streaming requests in flight while the
// steps after start_load run.
type load struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// streams is written by each stream's goroutine, and startErr by the
	// goroutine that starts a delayed load; both are read after wg.Wait.
	streams  []loadStream
	startErr error
}

// loadStream is how one background stream ended.
type loadStream struct {
	rid              string
	started          bool
	completionTokens int
	finish           string // the finish reason's type: length, abort, ...
	err              error
}

// promptIDs is a prompt of n token ids drawn from key: distinct keys share
// no prefix (the first id alone rarely repeats), so load and raw prompts
// never hit what another request left in the cache. The ids avoid byte and
// special tokens (below 1024) and stay inside a 32k vocabulary.
func promptIDs(key string, n int) []int {
	h := fnv.New64a()
	h.Write([]byte(key))
	rng := rand.New(rand.NewPCG(h.Sum64(), 0x9e3779b97f4a7c15))
	ids := make([]int, n)
	for i := range ids {
		ids[i] = 1024 + rng.IntN(30000)
	}
	return ids
}

func (a *startLoadAction) kind() string { return kindStartLoad }

func (a *startLoadAction) describe() string {
	s := fmt.Sprintf("start load %s: %d concurrent stream(s), each %d prompt tokens of its own and %d new tokens",
		a.name, a.streams, a.promptTokens, a.maxNew)
	if a.delay > 0 {
		s += fmt.Sprintf(", sent %g simulated seconds from now", a.delay)
	}
	return s
}

func (a *startLoadAction) figures() []string      { return nil }
func (a *startLoadAction) expectations() []string { return nil }
func (a *startLoadAction) contexts() []int        { return nil }
func (a *startLoadAction) legs() []string         { return nil }

// run starts the streams one after the other, each once the server has
// answered its headers (a streaming /generate answers them as it queues
// the request), so their arrival order is the same from run to run. With a
// delay it returns at once and starts them later, on its own goroutine; a
// failure to start one is then reported when the load is stopped.
func (a *startLoadAction) run(ctx context.Context, r *runner) (*result, error) {
	lctx, cancel := context.WithCancel(ctx)
	l := &load{cancel: cancel, streams: make([]loadStream, a.streams)}
	r.loads[a.name] = l
	for i := range l.streams {
		l.streams[i].rid = fmt.Sprintf("%s-load-%s-%d", r.sc.Name, a.name, i+1)
	}
	write := func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "load %s: %d stream(s), rids %s .. %s\n", a.name, a.streams, l.streams[0].rid, l.streams[a.streams-1].rid)
		return err
	}
	if a.delay == 0 {
		return &result{write: write}, a.start(lctx, r, l)
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		t := time.NewTimer(r.wall(a.delay))
		defer t.Stop()
		select {
		case <-t.C:
			l.startErr = a.start(lctx, r, l)
		case <-lctx.Done():
		}
	}()
	return &result{write: write}, nil
}

// start sends the streams, one after the other, and leaves a goroutine
// reading each.
func (a *startLoadAction) start(ctx context.Context, r *runner, l *load) error {
	for i := range l.streams {
		s := &l.streams[i]
		body, err := json.Marshal(map[string]any{
			"rid":             s.rid,
			"input_ids":       promptIDs(s.rid, a.promptTokens),
			"sampling_params": map[string]any{"max_new_tokens": a.maxNew, "ignore_eos": true, "temperature": 0},
			"stream":          true,
		})
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url+"/generate", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := r.http.Do(req)
		if err != nil {
			return fmt.Errorf("load %s stream %d: %w", a.name, i+1, err)
		}
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return fmt.Errorf("load %s stream %d: HTTP %d: %s", a.name, i+1, resp.StatusCode, strings.TrimSpace(string(b)))
		}
		s.started = true
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer resp.Body.Close()
			s.completionTokens, s.finish, s.err = readLoadStream(resp.Body)
		}()
	}
	return nil
}

// readLoadStream reads a /generate stream to its end: the last event's
// completion tokens and finish reason.
func readLoadStream(body io.Reader) (int, string, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	tokens, finish := 0, ""
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		data = strings.TrimSpace(data)
		if data == "[DONE]" {
			return tokens, finish, nil
		}
		var ev struct {
			MetaInfo struct {
				CompletionTokens int `json:"completion_tokens"`
				FinishReason     *struct {
					Type string `json:"type"`
				} `json:"finish_reason"`
			} `json:"meta_info"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return tokens, finish, fmt.Errorf("reading a stream event: %w", err)
		}
		tokens = ev.MetaInfo.CompletionTokens
		if fr := ev.MetaInfo.FinishReason; fr != nil {
			finish = fr.Type
		}
	}
	if err := sc.Err(); err != nil {
		return tokens, finish, err
	}
	return tokens, finish, errors.New("the stream ended without data: [DONE]")
}

func (a *stopLoadAction) kind() string { return kindStopLoad }

func (a *stopLoadAction) describe() string {
	if a.abort {
		return fmt.Sprintf("stop load %s: disconnect its streams (the server aborts each 2 s later, as SGLang does)", a.name)
	}
	return fmt.Sprintf("stop load %s: wait for its streams to finish", a.name)
}

func (a *stopLoadAction) figures() []string      { return []string{"finished", "aborted"} }
func (a *stopLoadAction) expectations() []string { return []string{expFigure} }
func (a *stopLoadAction) contexts() []int        { return nil }
func (a *stopLoadAction) legs() []string         { return nil }

// run waits for the streams, or disconnects them and waits for their
// readers: finished counts the streams that ran to their length, aborted
// the others. A stream that failed otherwise fails the step.
func (a *stopLoadAction) run(_ context.Context, r *runner) (*result, error) {
	l := r.loads[a.name]
	delete(r.loads, a.name)
	if a.abort {
		l.cancel()
	}
	l.wg.Wait()
	l.cancel()
	if l.startErr != nil {
		return nil, l.startErr
	}
	finished, aborted := 0, 0
	for _, s := range l.streams {
		switch {
		case !s.started:
			return nil, fmt.Errorf("load %s stream %s was never sent: stop_load came before its delay ran out", a.name, s.rid)
		case s.err == nil && s.finish == "length":
			finished++
		case a.abort || s.finish == "abort":
			aborted++
		default:
			return nil, fmt.Errorf("load %s stream %s: finish %q after %d tokens: %v", a.name, s.rid, s.finish, s.completionTokens, s.err)
		}
	}
	rw := &row{figures: map[string]*float64{}}
	rw.set("finished", float64(finished))
	rw.set("aborted", float64(aborted))
	write := func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "load %s: %d of %d streams finished, %d aborted\n", a.name, finished, len(l.streams), aborted)
		return err
	}
	return &result{rows: []*row{rw}, write: write}, nil
}

// stopLoads disconnects every load still running when the scenario ends.
func (r *runner) stopLoads() {
	for name, l := range r.loads {
		l.cancel()
		l.wg.Wait()
		delete(r.loads, name)
	}
}
