package calibrate

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/sglmock/sglmock/internal/cputime"
)

// bentRows are n rows at distinct prompt sizes whose times are the
// base's, bent by up to 20 % in a pattern no formula follows: every form,
// both tables included, is tried on them.
func bentRows(b *testing.B, n int) []byte {
	base := load(b, "kimi-k2.6-rtx6000")
	var csv bytes.Buffer
	csv.WriteString("ctx_req,prompt_tok,t_a,t_b,a,b,b_cached\n")
	for i := range n {
		prompt := 1000 + (i*7919)%150000
		noise := 1 + 0.2*float64((i*104729)%1000)/1000
		fmt.Fprintf(&csv, "%d,%d,%g,%g,1,65,false\n", prompt, prompt, legSeconds(base, prompt, 0, 1)*noise, 1.3*legSeconds(base, prompt, 0, 65)/noise)
	}
	return csv.Bytes()
}

// BenchmarkCalibrate100k reads and fits 100,000 rows, and, as its baseline
// in the same run, 1,000: the time of the whole (wall and CPU) and the
// ratio of their costs per row, which stays at or below 1: the tables are
// fitted through at most maxSpans pooled legs, the least squares are
// normal equations summed once, and leaving out a prompt size whose legs
// show no spread of their own (these rows') subtracts its own legs' (a
// table is refitted for leave-one-out at 64 sizes at most, a size with a
// spread within maxLOOWork legs in all). A table of a point per row, scanned for every decode round, took
// over ten minutes for these rows. Run it with -benchtime 1x.
func BenchmarkCalibrate100k(b *testing.B) {
	base := load(b, "kimi-k2.6-rtx6000")
	small, large := bentRows(b, 1000), bentRows(b, 100000)
	fit := func(csv []byte) time.Duration {
		start := time.Now()
		rows, err := ReadCSV(bytes.NewReader(csv), "rows.csv")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Fit(rows, base, Options{Name: "x"}); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	var tSmall, tLarge, cpuLarge time.Duration
	for b.Loop() {
		tSmall += fit(small)
		cpu := cputime.Of(b)
		tLarge += fit(large)
		cpuLarge += cputime.Of(b) - cpu
	}
	b.ReportMetric(tLarge.Seconds()/float64(b.N), "s/100k-rows")
	b.ReportMetric(cpuLarge.Seconds()/float64(b.N), "cpu-s/100k-rows")
	b.ReportMetric((tLarge.Seconds()/100000)/(tSmall.Seconds()/1000), "per-row-ratio")
}
