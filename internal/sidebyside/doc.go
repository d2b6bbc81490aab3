// Command sidebyside measures two OpenAI-compatible servers side by side:
// a closed loop of c clients, each on its own keep-alive connection, sends
// one fixed /v1/completions request after another, in alternating rounds
// of n requests to each server, and prints each server's median requests/s,
// the median of the rounds' ratios and, given the servers' process ids,
// their CPU time per request (from /proc).
//
// It is the client of the side-by-side comparison with llm-d-inference-sim
// (docs/testing.md). Go's net/http client spends about as much CPU on a
// short request as the mock's server does: on one core it tops out near
// 18,000 requests/s, where a bare net/http server replaying a fixed answer
// would serve 50,000, so with it the comparison measures the client. This
// one writes the request's bytes and reads the response by its
// Content-Length or chunks, at a few microseconds a request.
//
//	go run ./internal/sidebyside -a http://127.0.0.1:30000 -b http://127.0.0.1:8000 \
//	    -c 64 -rounds 5 -n 3200 -words 100 -max-tokens 16 -ignore-eos
//
// -ignore-eos asks both servers for every one of max_tokens tokens:
// llm-d-inference-sim's random mode otherwise ends an answer at a random
// length (about 10 of 16 tokens on average), doing less work than the mock.
package main
