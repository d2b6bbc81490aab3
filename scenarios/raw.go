package scenarios

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sglmock/sglmock/harness"
)

func (a *rawAction) kind() string { return kindRaw }

func (a *rawAction) describe() string {
	s := a.method + " " + a.path
	if a.promptTokens > 0 {
		s += fmt.Sprintf(" with a fresh prompt of %d token ids", a.promptTokens)
	}
	if a.prompts != nil {
		parts := make([]string, len(a.prompts))
		for i, p := range a.prompts {
			parts[i] = fmt.Sprint(p.tokens)
			if p.shared > 0 {
				parts[i] += fmt.Sprintf(" (%d shared)", p.shared)
			}
		}
		s += fmt.Sprintf(" with a batch of %d fresh prompts of token ids: %s", len(a.prompts), strings.Join(parts, ", "))
	}
	if a.body != nil {
		b, _ := json.Marshal(a.body)
		s += " " + string(b)
	}
	return s
}

// batchIDs builds the batch's prompts, fresh for the run: the shared
// prefix, as long as the longest share, then each prompt's own ids.
func (a *rawAction) batchIDs(r *runner) [][]int {
	longest := 0
	for _, p := range a.prompts {
		longest = max(longest, p.shared)
	}
	shared := promptIDs(r.newID(), longest)
	out := make([][]int, len(a.prompts))
	for i, p := range a.prompts {
		out[i] = append(slices.Clip(shared[:p.shared]), promptIDs(r.newID(), p.tokens-p.shared)...)
	}
	return out
}

func (a *rawAction) figures() []string {
	figs := []string{"status", "seconds", "copies", "prompt_tokens", "cached_tokens", "completion_tokens",
		"input_tok_s", "server_requests", "computed_tokens", "computed_tok_s"}
	if a.prompts != nil {
		figs = append(figs, "ttft_s")
	}
	return figs
}

func (a *rawAction) expectations() []string { return []string{expStatus, expBody, expFigure} }
func (a *rawAction) contexts() []int        { return nil }
func (a *rawAction) legs() []string         { return nil }

// copyInfo is one sequence of a /generate answer (a list with n > 1 or a
// batch).
type copyInfo struct {
	MetaInfo struct {
		ID               string `json:"id"`
		PromptTokens     int    `json:"prompt_tokens"`
		CachedTokens     int    `json:"cached_tokens"`
		CompletionTokens int    `json:"completion_tokens"`
	} `json:"meta_info"`
}

// run sends the request, timed from sending to the last byte, and reads from the server's records the
// requests it ran meanwhile: with n > 1, SGLang runs one more request that
// prefills the prompt, then the copies. Each copy is a row; input_tok_s is
// what a script summing the copies' prompt_tokens over the time reports,
// computed_tok_s the prompt tokens the server computed over the same time.
func (a *rawAction) run(ctx context.Context, r *runner) (*result, error) {
	before, err := r.c.Requests(ctx)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, q := range before {
		seen[q.RID] = true
	}
	var body io.Reader
	if a.body != nil {
		b := maps.Clone(a.body)
		if a.promptTokens > 0 {
			b["input_ids"] = promptIDs(r.newID(), a.promptTokens)
		}
		if a.prompts != nil {
			b["input_ids"] = a.batchIDs(r)
		}
		enc, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(enc)
	}
	req, err := http.NewRequestWithContext(ctx, a.method, r.url+a.path, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := r.http.Do(req)
	if err != nil {
		return nil, &harness.ConnError{Err: err}
	}
	b, err := io.ReadAll(resp.Body)
	seconds := time.Since(start).Seconds() * r.speedup
	resp.Body.Close()
	if err != nil {
		return nil, &harness.ConnError{Err: err}
	}
	after, err := r.c.Requests(ctx)
	if err != nil {
		return nil, err
	}
	ran, computed := 0, 0
	ttft := map[string]*float64{}
	for _, q := range after {
		if !seen[q.RID] {
			ran++
			computed += q.PromptTokens - q.CachedTokens
			ttft[q.RID] = q.TTFT
		}
	}
	var copies []copyInfo
	if resp.StatusCode == http.StatusOK {
		if bytes.HasPrefix(bytes.TrimSpace(b), []byte("[")) {
			err = json.Unmarshal(b, &copies)
		} else {
			var one copyInfo
			err = json.Unmarshal(b, &one)
			copies = []copyInfo{one}
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: reading the answer: %w", a.method, a.path, err)
		}
	}
	inputTokens := 0
	for _, c := range copies {
		inputTokens += c.MetaInfo.PromptTokens
	}
	common := func(rw *row) {
		rw.set("status", float64(resp.StatusCode))
		rw.set("seconds", seconds)
		rw.set("copies", float64(len(copies)))
		rw.set("server_requests", float64(ran))
		rw.set("computed_tokens", float64(computed))
		rw.setPtr("input_tok_s", perSecond(inputTokens, seconds))
		rw.setPtr("computed_tok_s", perSecond(computed, seconds))
	}
	res := &result{}
	for i, c := range copies {
		rw := &row{label: fmt.Sprintf("copy %d", i+1), figures: map[string]*float64{}, status: resp.StatusCode, body: string(b)}
		if a.prompts != nil {
			// A prompt of the batch: selected by its number, with the
			// time to its first token, from the server's records.
			rw.ctx, rw.label = i+1, fmt.Sprintf("prompt %d", i+1)
			rw.setPtr("ttft_s", ttft[c.MetaInfo.ID])
		}
		common(rw)
		rw.set("prompt_tokens", float64(c.MetaInfo.PromptTokens))
		rw.set("cached_tokens", float64(c.MetaInfo.CachedTokens))
		rw.set("completion_tokens", float64(c.MetaInfo.CompletionTokens))
		res.rows = append(res.rows, rw)
	}
	if len(copies) == 0 {
		rw := &row{figures: map[string]*float64{}, status: resp.StatusCode, body: string(b)}
		common(rw)
		for _, name := range []string{"prompt_tokens", "cached_tokens", "completion_tokens"} {
			rw.figures[name] = nil
		}
		res.rows = append(res.rows, rw)
	}
	res.write = func(w io.Writer) error {
		var sb strings.Builder
		fmt.Fprintf(&sb, "HTTP %d after %.3f s; the server ran it as %d request(s), computing %d prompt tokens\n", resp.StatusCode, seconds, ran, computed)
		if len(copies) == 0 {
			fmt.Fprintf(&sb, "body: %.300q\n", b)
		} else {
			tw := tabwriter.NewWriter(&sb, 0, 0, 1, ' ', tabwriter.AlignRight)
			items := "copies"
			if a.prompts != nil {
				items = "prompts"
				fmt.Fprintln(tw, "prompt\tprompt_tokens\tshared\tcached_tokens\tcompletion_tokens\tttft_s\t")
			} else {
				fmt.Fprintln(tw, "copy\tprompt_tokens\tcached_tokens\tcompletion_tokens\t")
			}
			for i, c := range copies {
				if a.prompts != nil {
					t := "-"
					if v := ttft[c.MetaInfo.ID]; v != nil {
						t = fmt.Sprintf("%.4f", *v)
					}
					fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%s\t\n", i+1, c.MetaInfo.PromptTokens, a.prompts[i].shared, c.MetaInfo.CachedTokens, c.MetaInfo.CompletionTokens, t)
					continue
				}
				fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t\n", i+1, c.MetaInfo.PromptTokens, c.MetaInfo.CachedTokens, c.MetaInfo.CompletionTokens)
			}
			tw.Flush()
			fmt.Fprintf(&sb, "summed over the %s: %d prompt tokens, %.0f tok/s; computed by the server: %d, %.0f tok/s\n",
				items, inputTokens, float64(inputTokens)/seconds, computed, float64(computed)/seconds)
		}
		_, err := io.WriteString(w, sb.String())
		return err
	}
	return res, nil
}

func perSecond(n int, seconds float64) *float64 {
	if seconds <= 0 {
		return nil
	}
	v := float64(n) / seconds
	return &v
}
