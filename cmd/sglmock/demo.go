package main

import (
	"fmt"
	"io"

	"sglmock/radixcache"
)

// runDemo replays the radix-cache half of the seed story with the real
// radix tree: the two-point method sends the same prompt twice, and the
// second leg reuses all but one prompt token. The timed version of the demo
// needs the engine and the HTTP server, which are not built yet; the demo
// says so instead of pretending.
func runDemo(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintf(stderr, "sglmock demo: takes no arguments, got %q\n", args)
		return 2
	}
	fmt.Fprintln(stdout, "The trap: the two-point decode method sends one prompt twice (max_new_tokens a, then b).")
	fmt.Fprintln(stdout, "SGLang's radix cache serves the second leg's prompt from cache, so t_b < t_a and decode = nan.")
	fmt.Fprintln(stdout)
	fmt.Fprintf(stdout, "%-12s %10s %10s %10s %12s\n", "prompt_tok", "leg", "flushed", "cached", "computed")
	for _, n := range []int{1407, 11382, 45507} {
		prompt := make([]int32, n)
		for i := range prompt {
			prompt[i] = int32(i*7919%150000 + 1)
		}
		for _, flush := range []bool{false, true} {
			tree, err := radixcache.New[string](1)
			if err != nil {
				fmt.Fprintln(stderr, "sglmock demo:", err)
				return 1
			}
			for leg, name := range []string{"a", "b"} {
				if leg == 1 && flush {
					tree.Reset() // what /flush_cache does when the server is idle
				}
				cached, _ := tree.Match("", prompt[:tree.ReusablePrefixLen(n)])
				tree.Insert("", prompt, "")
				fmt.Fprintf(stdout, "%-12d %10s %10v %10d %12d\n", n, name, flush && leg == 1, cached, n-cached)
			}
		}
	}
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "Status: the radix cache above is SGLang's rules, exactly. Coming next: the timed engine")
	fmt.Fprintln(stdout, "(profiles calibrated to the seed), the HTTP server (sglmock serve), the harness (sglmock bench)")
	fmt.Fprintln(stdout, "and this demo measuring t_a, t_b and decode tok/s before and after the fix.")
	return 0
}
