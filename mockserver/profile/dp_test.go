package profile

import (
	"strings"
	"testing"
)

// TestDPDerivedLimits: under DP attention SGLang divides
// chunked_prefill_size (server_args.py, _handle_data_parallelism) and
// max_running_requests (_resolve_max_num_reqs) by dp_size and scales the
// token ratio by 0.3; plain DP ranks keep the profile's limits; dp_size 1
// turns DP attention off.
func TestDPDerivedLimits(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		dp, tp               int
		attention            bool
		chunked              int
		wantAttention        bool
		wantChunk, wantRun   int
		wantConservativeness float64
		wantAttnRank1        int
	}{
		{"dp attention", 2, 2, true, 8192, true, 4096, 128, 0.3, 1},
		{"dp attention 8 on 8", 8, 8, true, 8192, true, 1024, 32, 0.3, 1},
		{"chunking off stays off", 2, 2, true, -1, true, -1, 128, 0.3, 1},
		{"plain dp", 2, 1, false, 8192, false, 8192, 256, 1, 0},
		{"dp 1 turns attention off", 1, 4, true, 8192, false, 8192, 256, 1, 0},
	} {
		p := mustLoad(t, "default")
		p.DPSize, p.TPSize, p.EnableDPAttention, p.ChunkedPrefillSize = tc.dp, tc.tp, tc.attention, tc.chunked
		if err := p.Validate(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if p.DPAttention() != tc.wantAttention || p.RankChunkedPrefillSize() != tc.wantChunk || p.RankMaxRunningRequests() != tc.wantRun ||
			p.ScheduleConservativeness() != tc.wantConservativeness || p.AttnDPRank(1) != tc.wantAttnRank1 {
			t.Fatalf("%s: got attention %v, chunk %d, running %d, conservativeness %v, attention rank %d; want %v, %d, %d, %v, %d",
				tc.name, p.DPAttention(), p.RankChunkedPrefillSize(), p.RankMaxRunningRequests(), p.ScheduleConservativeness(), p.AttnDPRank(1),
				tc.wantAttention, tc.wantChunk, tc.wantRun, tc.wantConservativeness, tc.wantAttnRank1)
		}
		if tokens, _ := p.ChunkBudget(); tc.wantChunk > 0 && tokens != tc.wantChunk {
			t.Fatalf("%s: chunk budget %d, want %d", tc.name, tokens, tc.wantChunk)
		}
	}
}

func TestBalanceMethod(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"", "round_robin"}, {"auto", "round_robin"}, {"round_robin", "round_robin"},
		{"total_requests", "total_requests"}, {"total_tokens", "total_tokens"},
	} {
		p := Profile{LoadBalanceMethod: tc.set}
		if got := p.BalanceMethod(); got != tc.want {
			t.Fatalf("load_balance_method %q: got %s, want %s", tc.set, got, tc.want)
		}
	}
}

// TestDPValidation: SGLang's refusals, and the mock's bounds, name the
// field.
func TestDPValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(p *Profile)
		want string
	}{
		{"tp not a multiple of dp", func(p *Profile) { p.DPSize, p.EnableDPAttention = 2, true },
			"tp_size = 1: must be a multiple of dp_size (2) with enable_dp_attention"},
		{"too many ranks", func(p *Profile) { p.DPSize = MaxDPSize + 1 }, "dp_size = 129: must be in 1..128"},
		{"negative tp", func(p *Profile) { p.TPSize = -1 }, "tp_size = -1: must be in 1..1024"},
		{"unknown method", func(p *Profile) { p.LoadBalanceMethod = "shortest_queue" },
			"load_balance_method = shortest_queue: must be one of auto, round_robin, follow_bootstrap_room, total_requests, total_tokens"},
		{"bootstrap room", func(p *Profile) { p.LoadBalanceMethod = "follow_bootstrap_room" }, "PD-disaggregation bootstrap_room"},
		{"fewer running than ranks", func(p *Profile) {
			p.DPSize, p.TPSize, p.EnableDPAttention, p.MaxRunningRequests = 8, 8, true, 4
		}, "max_running_requests = 4: must be at least dp_size (8)"},
		{"chunk below a page", func(p *Profile) {
			p.DPSize, p.TPSize, p.EnableDPAttention, p.PageSize, p.ChunkedPrefillSize = 4, 4, true, 64, 128
		}, "chunked_prefill_size = 128: divided by dp_size (4) under DP attention gives 32"},
	} {
		p := mustLoad(t, "default")
		tc.set(p)
		err := p.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}
