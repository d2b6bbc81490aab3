package tokenizer_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/mockserver/tokenizer"
)

// prose returns n words of varied English-like text: common words, names,
// numbers and punctuation, in sentences and paragraphs, drawn from a fixed
// seed (a prompt, not one passage repeated).
func prose(n int) string {
	words := strings.Fields(`the of and to in is that for it as was with be by on not he this are or his from at which
		but have an had they you were their one all we can her has there been if more when will would who so no she other
		its may these what them than some him time into only do could new about two then first also any like our over such
		even just most made after where years those many well used being make each much way three same might work must
		year back great under long world still good since life both water place while state here few house part know take
		found small given large point every right case often model cache token fast batch value data order early light
		level field local power road never again shape keep mean own show real plan test third clear close quite rate cost
		step less near sure benchmark throughput latency prefill decode server request response measurement accuracy`)
	names := []string{"Alice", "Tokyo", "SGLang", "Llama", "GPU", "H100", "Kubernetes", "Paris", "NVIDIA", "Python"}
	r := rand.New(rand.NewPCG(42, 7))
	var b strings.Builder
	for i := range n {
		w := words[r.IntN(len(words))]
		switch r.IntN(40) {
		case 0:
			w = names[r.IntN(len(names))]
		case 1:
			w = fmt.Sprint(r.IntN(100000))
		}
		if i%15 == 0 {
			if i > 0 {
				b.WriteString(". ")
				if i%150 == 0 {
					b.WriteString("\n\n")
				}
			}
			w = strings.ToUpper(w[:1]) + w[1:]
		} else {
			b.WriteByte(' ')
			if r.IntN(12) == 0 {
				b.WriteString(", ")
			}
		}
		b.WriteString(w)
	}
	return b.String() + "."
}

// BenchmarkEncodeReal tokenizes an 8,000-word prompt and a 200,000-token
// one with real model tokenizers and, in the same loop, with the built-in
// tokenizer: x-builtin is the real tokenizer's time over the built-in's.
func BenchmarkEncodeReal(b *testing.B) {
	o := mocktest.NewOracle(b)
	builtin, err := tokenizer.Builtin(tokenizer.BuiltinOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ref, err := tokenizer.Load(o.Models("llama3_1"))
	if err != nil {
		b.Fatal(err)
	}
	long := prose(150_000)
	for ref.Count(long) < 200_000 {
		long += " " + prose(10_000)
	}
	texts := []struct{ name, text string }{{"8k-words", prose(8000)}, {"200k-tokens", long}}
	for _, model := range []string{"llama3_1", "qwen3", "deepseek_v3", "llama2"} {
		tok, err := tokenizer.Load(o.Models(model))
		if err != nil {
			b.Fatal(err)
		}
		for _, tt := range texts {
			b.Run(model+"/"+tt.name, func(b *testing.B) {
				var realNs, builtinNs int64
				var ids []int32
				tok.Encode(nil, tt.text) // the word cache warms up as a server's does
				i := 0
				for b.Loop() {
					// A new nonce each time, as a benchmark's prompts have:
					// no prompt cache hit.
					i++
					text := fmt.Sprintf("%d: %s", i, tt.text)
					start := time.Now()
					ids = tok.Encode(ids[:0], text)
					realNs += time.Since(start).Nanoseconds()
					start = time.Now()
					builtin.Encode(nil, text)
					builtinNs += time.Since(start).Nanoseconds()
				}
				b.ReportMetric(float64(realNs)/float64(builtinNs), "x-builtin")
				b.ReportMetric(float64(len(ids)), "tokens")
				b.ReportMetric(float64(realNs)/float64(b.N)/1e6, "ms/encode")
			})
		}
	}
}

// BenchmarkEncodeRepeated tokenizes one 200,000-token prompt again and
// again, as a benchmark that resends a prompt does: the prompt cache
// answers; x-first is a repeat's time over the first encode's.
func BenchmarkEncodeRepeated(b *testing.B) {
	o := mocktest.NewOracle(b)
	tok, err := tokenizer.Load(o.Models("llama3_1"))
	if err != nil {
		b.Fatal(err)
	}
	text := prose(150_000)
	start := time.Now()
	tok.Encode(nil, text)
	first := time.Since(start)
	var ids []int32
	var repeatNs int64
	for b.Loop() {
		start := time.Now()
		ids = tok.Encode(ids[:0], text)
		repeatNs += time.Since(start).Nanoseconds()
	}
	b.ReportMetric(float64(repeatNs)/float64(b.N)/float64(first.Nanoseconds()), "x-first")
	b.ReportMetric(float64(len(ids)), "tokens")
}

// BenchmarkLoadMemory loads Qwen 3's tokenizer (151,643 tokens, 151,387
// merges) and reports the heap it keeps and the time a load takes.
func BenchmarkLoadMemory(b *testing.B) {
	o := mocktest.NewOracle(b)
	var kept *tokenizer.Tokenizer
	var heap uint64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		tok, err := tokenizer.Load(o.Models("qwen3"))
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap = after.HeapAlloc - before.HeapAlloc
		kept = tok
	}
	runtime.KeepAlive(kept)
	b.ReportMetric(float64(heap)/(1<<20), "MiB-heap")
}
