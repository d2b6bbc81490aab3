package profile

import (
	"fmt"
)

// Data parallelism, as SGLang's launch flags set it (server_args.py):
// dp_size schedulers ("DP ranks"), each with its own waiting queue, running
// batch, KV pool and radix cache, behind a controller that dispatches each
// request to one of them (managers/data_parallel_controller.py).
//
// With enable_dp_attention the ranks share one tensor-parallel group of
// tp_size GPUs: attention is data-parallel, the MoE/MLP layers are not, so
// every iteration of every rank runs together (the engine's lockstep). SGLang
// then divides chunked_prefill_size by dp_size (_handle_data_parallelism),
// gives each rank max_running_requests // dp_size requests
// (model_runner_kv_cache_mixin.py, _resolve_max_num_reqs) and scales the
// admission's token ratio by a schedule_conservativeness of 0.3. Without it,
// each rank is a replica of its own on tp_size GPUs: its limits are the
// profile's, and it runs on its own timeline.
//
// The KV pool is not divided: SGLang sizes each rank's pool from its own
// GPU memory, capped by --max-total-tokens, so max_total_tokens is one
// rank's pool and the deployment holds dp_size of them.

// LoadBalanceMethods are SGLang's --load-balance-method choices, in its
// order.
var LoadBalanceMethods = []string{"auto", "round_robin", "follow_bootstrap_room", "total_requests", "total_tokens"}

// Load balance methods the controller runs.
const (
	RoundRobin    = "round_robin"
	TotalRequests = "total_requests"
	TotalTokens   = "total_tokens"
)

// MaxDPSize bounds dp_size: each rank keeps a radix tree, a queue and
// counters of its own. The largest DP-attention deployments run a few
// dozen ranks.
const MaxDPSize = 128

// dpAttentionConservativeness is the schedule_conservativeness SGLang's
// _handle_data_parallelism sets under DP attention (1.0 times 0.3).
const dpAttentionConservativeness = 0.3

// Ranks is the number of DP ranks: dp_size, 1 when unset.
func (p *Profile) Ranks() int { return max(p.DPSize, 1) }

// TensorParallel is tp_size, 1 when unset.
func (p *Profile) TensorParallel() int { return max(p.TPSize, 1) }

// DPAttention reports whether the ranks run DP attention: SGLang turns
// enable_dp_attention off when dp_size is 1.
func (p *Profile) DPAttention() bool { return p.EnableDPAttention && p.Ranks() > 1 }

// BalanceMethod is the load balance method the controller runs: "auto"
// (or unset) is round_robin outside PD disaggregation, which the mock does
// not model (server_args.py, _handle_load_balance_method).
func (p *Profile) BalanceMethod() string {
	if p.LoadBalanceMethod == "" || p.LoadBalanceMethod == "auto" {
		return RoundRobin
	}
	return p.LoadBalanceMethod
}

// RankChunkedPrefillSize is chunked_prefill_size as each rank's scheduler
// runs it, and as SGLang's /server_info reports it: divided by dp_size
// under DP attention (Python's floor division: -1 stays -1).
func (p *Profile) RankChunkedPrefillSize() int {
	if p.DPAttention() && p.ChunkedPrefillSize != -1 {
		return p.ChunkedPrefillSize / p.Ranks()
	}
	return p.ChunkedPrefillSize
}

// RankMaxRunningRequests is the most requests one rank runs at once
// (effective_max_running_requests_per_dp): max_running_requests divided by
// dp_size under DP attention, as SGLang's model runner divides
// --max-running-requests.
func (p *Profile) RankMaxRunningRequests() int {
	if p.DPAttention() {
		return p.MaxRunningRequests / p.Ranks()
	}
	return p.MaxRunningRequests
}

// ScheduleConservativeness is SGLang's schedule_conservativeness as the
// deployment runs it: 0.3 under DP attention, else 1.
func (p *Profile) ScheduleConservativeness() float64 {
	if p.DPAttention() {
		return dpAttentionConservativeness
	}
	return 1
}

// AttnTPSize is the size of the tensor-parallel group that runs each DP
// rank's attention: tp_size / dp_size under DP attention, else tp_size
// (get_attention_tp_size).
func (p *Profile) AttnTPSize() int {
	if p.DPAttention() {
		return p.TensorParallel() / p.Ranks()
	}
	return p.TensorParallel()
}

// AttnDPRank is the attention-DP rank SGLang gives DP rank r: r under DP
// attention, else 0 for every rank (compute_dp_attention_world_info). The
// KV event publisher offsets its ports by it, and its batches carry it.
func (p *Profile) AttnDPRank(r int) int {
	if p.DPAttention() {
		return r
	}
	return 0
}

// validateDP checks the parallelism keys as SGLang's server args do, and
// that one rank's limits stay usable.
func (v *validator) validateDP(p *Profile) {
	v.check(p.TPSize >= 0 && p.TPSize <= 1024, "tp_size", p.TPSize, "must be in 1..1024 (0 or absent: 1)")
	v.check(p.DPSize >= 0 && p.DPSize <= MaxDPSize, "dp_size", p.DPSize, fmt.Sprintf("must be in 1..%d (0 or absent: 1)", MaxDPSize))
	method := p.LoadBalanceMethod
	v.choice("load_balance_method", method, LoadBalanceMethods)
	v.check(method != "follow_bootstrap_room", "load_balance_method", method,
		"follow_bootstrap_room routes by each request's PD-disaggregation bootstrap_room, which sglmock does not model")
	if !p.DPAttention() || v.err != nil {
		return
	}
	dp, tp := p.Ranks(), p.TensorParallel()
	// server_args.py asserts tp_size % dp_size == 0 under DP attention: the
	// ranks split one tensor-parallel group.
	v.check(tp%dp == 0, "tp_size", tp, fmt.Sprintf(
		"must be a multiple of dp_size (%d) with enable_dp_attention: the DP ranks split one tensor-parallel group (SGLang asserts tp_size %% dp_size == 0)", dp))
	v.check(p.RankMaxRunningRequests() >= 1, "max_running_requests", p.MaxRunningRequests, fmt.Sprintf(
		"must be at least dp_size (%d) with enable_dp_attention: each rank runs max_running_requests // dp_size", dp))
	if chunk := p.RankChunkedPrefillSize(); p.ChunkedPrefillSize != -1 && p.PageSize >= 1 {
		v.check(chunk >= p.PageSize && chunk%p.PageSize == 0, "chunked_prefill_size", p.ChunkedPrefillSize, fmt.Sprintf(
			"divided by dp_size (%d) under DP attention gives %d, which must be a positive multiple of page_size (%d)", dp, chunk, p.PageSize))
	}
}
