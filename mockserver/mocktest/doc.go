// Package mocktest runs sglmock in-process for tests, in the manner of
// net/http/httptest: an in-memory listener, a mock SGLang server behind it,
// and the check that the engine holds nothing afterwards.
//
// Inside a testing/synctest bubble a real TCP socket would stall the bubble
// (a goroutine blocked in the kernel is not "durably blocked"), so the mock
// is served over net.Pipe connections: Listener hands the server end of each
// pipe to Accept, and the client's Transport dials the other end. The whole
// net/http stack, SSE included, then runs on virtual time, and a client's
// time.Since equals the modelled latency exactly.
//
// Every package's tests use this one copy: the api tests, the harness, the
// scenarios and the command.
package mocktest
