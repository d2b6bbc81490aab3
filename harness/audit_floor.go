package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/sglmock/sglmock/sim"
)

// maxProbeAnswer bounds a floor probe's answer: one token's JSON.
const maxProbeAnswer = 1 << 20

// measureFloors measures, on each route the command used, what two
// unrelated prompts share (a BOS token on text, a chat template's head on
// chat): two prompts that are nothing but two unrelated nonces, the
// second's cached tokens. On the mock the truth says them; on a real
// server the answer does, and a third probe repeats the first to learn
// whether the route reports cached tokens at all (SGLang's OpenAI routes
// report them only with --enable-cache-report, and give null for 0): a
// route that reports none has floor -1. ranks is the server's DP ranks
// (/server_info's dp_size), which the probes are pinned among.
func measureFloors(ctx context.Context, c *Client, routes []RouteFloor, mock bool, newID func() string) (floors []RouteFloor, ranks int, err error) {
	ranks, err = c.DPRanks(ctx)
	if err != nil {
		return nil, 0, err
	}
	pin := probeRank(ranks) // the probes on one rank, as placement.go says
	modelKnown := false
	for i := range routes {
		route := routes[i].Route
		if route != sim.RouteGenerate && route != sim.RouteGenerateIDs && !modelKnown {
			if err := c.discoverModel(ctx); err != nil {
				return nil, 0, err
			}
			modelKnown = true
		}
		f, err := measureFloor(ctx, c, route, mock, pin, newID)
		if err != nil {
			return nil, 0, fmt.Errorf("measuring the shared prefix floor on %s: %w", route, err)
		}
		routes[i].Floor = f
	}
	return routes, ranks, nil
}

func measureFloor(ctx context.Context, c *Client, route string, mock bool, pin *int, newID func() string) (int, error) {
	ids := []string{newID(), newID()}
	var probes []*Generation
	for i, id := range []string{ids[0], ids[1], ids[0]} {
		rid := fmt.Sprintf("floor-%d-%s", i+1, id)
		g, err := sendProbe(ctx, c, route, id, rid, mock, pin)
		if err != nil {
			return 0, err
		}
		probes = append(probes, g)
		if mock && i == 1 {
			t, err := c.Truth(ctx, rid)
			if err != nil {
				return 0, err
			}
			return t.CachedTokens, nil
		}
	}
	switch {
	case probes[1].CachedKnown:
		return probes[1].CachedTokens, nil
	case probes[2].CachedKnown && probes[2].CachedTokens > 0:
		return 0, nil // a null beside a reported repeat means 0
	}
	return -1, nil
}

// sendProbe sends one nonce prompt of some 800 tokens on route, asking
// for one token: longer than any page, so a repeat reuses whole pages.
func sendProbe(ctx context.Context, c *Client, route, id, rid string, mock bool, pin *int) (*Generation, error) {
	text := strings.Repeat(nonceText(id)+" ", floorRepeats)
	var ids []int
	for range floorRepeats {
		ids = append(ids, nonceIDs(id)...)
	}
	path, body := "/v1/completions", map[string]any{"model": c.model(), "max_tokens": 1, "temperature": 0}
	switch route {
	case sim.RouteGenerate, sim.RouteGenerateIDs:
		path, body = "/generate", map[string]any{"sampling_params": map[string]any{"max_new_tokens": 1, "temperature": 0}}
		if route == sim.RouteGenerate {
			body["text"] = text
		} else {
			body["input_ids"] = ids
		}
	case sim.RouteCompletions:
		body["prompt"] = text
	case sim.RouteCompletionsTokens:
		body["prompt"] = ids
	case sim.RouteChat:
		path = "/v1/chat/completions"
		body["messages"] = []map[string]string{{"role": "user", "content": text}}
	default:
		return nil, fmt.Errorf("no probe for route %q", route)
	}
	if mock {
		// Only the mock is known to take a rid on every route; its truth
		// is read by it.
		body["rid"] = rid
	}
	if pin != nil {
		body["routed_dp_rank"] = *pin
	}
	resp, err := c.post(ctx, path, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := readBounded(resp.Body, maxProbeAnswer)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &HTTPError{Route: "POST " + path, Status: resp.StatusCode, Body: string(b)}
	}
	var a answer
	g := &Generation{RID: rid}
	if err := json.Unmarshal(b, &a); err != nil || !a.apply(g) {
		return nil, fmt.Errorf("POST %s: an answer without meta_info or usage: %.200s", path, b)
	}
	return g, nil
}
