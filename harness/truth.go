package harness

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"

	"github.com/sglmock/sglmock/sim"
)

// SimInfo asks the server for its /sim/ profile. A server without /sim/
// (a real SGLang) gives nil and no error: the truth columns are then left
// out and nothing fails.
func (c *Client) SimInfo(ctx context.Context) (*sim.Profile, error) {
	var p sim.Profile
	status, err := c.get(ctx, "/sim/profile", &p)
	if status == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if p.Speedup <= 0 {
		return nil, fmt.Errorf("GET /sim/profile: speedup %v is not positive", p.Speedup)
	}
	return &p, nil
}

// Truth fetches the modelled timeline of a finished request by its rid.
func (c *Client) Truth(ctx context.Context, rid string) (*sim.Truth, error) {
	var t sim.Truth
	if _, err := c.getBounded(ctx, "/sim/requests/"+url.PathEscape(rid), &t, maxRecordsBody); err != nil {
		return nil, err
	}
	return &t, nil
}

// Expect fetches the model's prediction for a lone request.
func (c *Client) Expect(ctx context.Context, prompt, cached, completion int) (*sim.Expectation, error) {
	var e sim.Expectation
	q := url.Values{}
	q.Set("prompt_tokens", fmt.Sprint(prompt))
	q.Set("cached_tokens", fmt.Sprint(cached))
	q.Set("completion_tokens", fmt.Sprint(completion))
	if _, err := c.get(ctx, "/sim/expect?"+q.Encode(), &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// Requests lists the server's finished requests in arrival order.
func (c *Client) Requests(ctx context.Context) ([]sim.RequestSummary, error) {
	var rs []sim.RequestSummary
	_, err := c.getBounded(ctx, "/sim/requests", &rs, maxRecordsBody)
	return rs, err
}

// Stats fetches the server's load, cache and lifetime counts.
func (c *Client) Stats(ctx context.Context) (*sim.Stats, error) {
	var st sim.Stats
	if _, err := c.get(ctx, "/sim/stats", &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Flushes lists every /flush_cache call the server saw and its outcome.
func (c *Client) Flushes(ctx context.Context) ([]sim.Flush, error) {
	var fs []sim.Flush
	_, err := c.getBounded(ctx, "/sim/flushes", &fs, maxRecordsBody)
	return fs, err
}

// relErr is (got-want)/want, the signed relative error; 0 where it is
// undefined (a true time of 0, on a profile that charges nothing), so that
// no report holds a NaN or an infinity.
func relErr(got, want float64) float64 {
	e := (got - want) / want
	if math.IsNaN(e) || math.IsInf(e, 0) {
		return 0
	}
	return e
}

// errNotMock is returned by operations that need /sim/.
var errNotMock = errors.New("the server has no /sim/ endpoints (it is not sglmock)")
