package scenarios

import (
	"context"
	"errors"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"

	"github.com/sglmock/sglmock/harness"
)

// tierFigures are a two-point row's HiCache figures: the legs' cached
// tokens from the host and storage tiers (cached_tokens_details), and the
// seconds leg b's first prefill batch spent beyond its compute loading
// KV back from the host (the mock's truth).
var tierFigures = []string{"cached_a_host", "cached_a_storage", "cached_b_host", "cached_b_storage", "load_back_b_s"}

// setTiers sets a row's tier figures, the most any run's leg had; a leg
// whose cached tokens are unknown leaves its figures undefined.
func setTiers(rw *row, hr *harness.Row) {
	for _, leg := range []string{"a", "b"} {
		var host, storage *float64
		for _, run := range hr.Runs {
			l := run.A
			if leg == "b" {
				l = run.B
			}
			if l.CachedTokens == nil {
				host, storage = nil, nil
				break
			}
			h, s := 0.0, 0.0
			if l.Tiers != nil {
				h, s = float64(l.Tiers.Host), float64(l.Tiers.Storage)
			}
			host, storage = maxOf(host, h), maxOf(storage, s)
		}
		rw.figures["cached_"+leg+"_host"], rw.figures["cached_"+leg+"_storage"] = host, storage
	}
	var load *float64
	for _, run := range hr.Runs {
		t := run.B.Truth
		if t == nil {
			load = nil
			break
		}
		secs := 0.0
		for _, c := range t.Prefill {
			if c.LoadBack > 0 {
				secs += c.Duration - c.Cost
			}
		}
		load = maxOf(load, secs)
	}
	rw.figures["load_back_b_s"] = load
}

func maxOf(p *float64, x float64) *float64 {
	if p != nil && *p >= x {
		return p
	}
	return &x
}

// restartAction restarts the server: the mock is stopped and started again
// on the same profile, which keeps a file storage tier's pages and nothing
// else, as a restart of SGLang's process does.
type restartAction struct{}

func (p *parser) restart(n *yaml.Node, path string) (action, error) {
	if _, err := p.d.mapping(n, path); err != nil {
		return nil, err
	}
	if len(p.loads) > 0 {
		return nil, p.d.errorf(n, path, "stop the loads first: a restart ends their streams")
	}
	return &restartAction{}, nil
}

func (a *restartAction) kind() string           { return kindRestart }
func (a *restartAction) describe() string       { return "restart the server (its file storage tier stays)" }
func (a *restartAction) figures() []string      { return nil }
func (a *restartAction) expectations() []string { return nil }
func (a *restartAction) contexts() []int        { return nil }
func (a *restartAction) legs() []string         { return nil }

func (a *restartAction) run(ctx context.Context, r *runner) (*result, error) {
	if r.restart == nil {
		return nil, errors.New("this runner cannot restart the server")
	}
	t, err := r.restart(ctx)
	if err != nil {
		return nil, fmt.Errorf("restarting the server: %w", err)
	}
	r.http, r.url = t.HTTP, t.URL
	r.c = &harness.Client{HTTP: t.HTTP, BaseURL: t.URL, Backend: harness.SGLang}
	if t.Restart != nil {
		r.restart = t.Restart
	}
	write := func(w io.Writer) error {
		_, err := fmt.Fprintln(w, "restarted: a new server on the same profile and storage directory")
		return err
	}
	return &result{write: write}, nil
}
