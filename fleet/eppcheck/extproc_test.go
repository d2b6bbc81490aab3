package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/structpb"
)

// fakePicker answers ext_proc streams as the llm-d router's picker does
// (pkg/epp/handlers/server.go): nothing until the request body's end of
// stream; then the header response with the destination header and the
// envoy.lb metadata, and the body as streamed responses in two chunks;
// after the response headers and body, their responses, the body's ending
// the stream. It records what the client sent and fails on anything Envoy
// would not send.
type fakePicker struct {
	extprocv3.UnimplementedExternalProcessorServer
	// pick chooses the destination for a request body; "" answers with
	// an ImmediateResponse 400, as the picker does for a bad request.
	pick func(body []byte) string

	mu       sync.Mutex
	protoErr []string
	streams  int
	statuses []string // each stream's :status response header
}

func (f *fakePicker) fail(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.protoErr = append(f.protoErr, fmt.Sprintf(format, args...))
}

func header(h *extprocv3.HttpHeaders, key string) string {
	for _, v := range h.GetHeaders().GetHeaders() {
		if v.GetKey() == key {
			return string(v.GetRawValue())
		}
	}
	return ""
}

func (f *fakePicker) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	f.mu.Lock()
	f.streams++
	f.mu.Unlock()
	req, err := srv.Recv()
	if err != nil {
		return err
	}
	hs := req.GetRequestHeaders()
	if hs == nil || hs.GetEndOfStream() || header(hs, ":method") != "POST" || header(hs, ":path") == "" ||
		header(hs, "content-type") != "application/json" || header(hs, "x-request-id") == "" {
		f.fail("first message: want the request headers (POST, :path, content-type, x-request-id) without end of stream, got %v", req)
		return nil
	}
	var body []byte
	for {
		req, err := srv.Recv()
		if err != nil {
			return err
		}
		b := req.GetRequestBody()
		if b == nil {
			f.fail("want request body chunks, got %v", req)
			return nil
		}
		body = append(body, b.GetBody()...)
		if b.GetEndOfStream() {
			break
		}
	}
	if cl := header(hs, "content-length"); cl != fmt.Sprint(len(body)) {
		f.fail("content-length %s, body %d bytes", cl, len(body))
	}
	dest := f.pick(body)
	if dest == "" {
		return srv.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
			ImmediateResponse: &extprocv3.ImmediateResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode_BadRequest}, Body: []byte("no")}}})
	}
	scores, _ := structpb.NewStruct(map[string]any{dest: 7.0, "10.9.9.9:1": 4.0})
	lb := &structpb.Struct{Fields: map[string]*structpb.Value{
		DestinationHeader: structpb.NewStringValue(dest), scoresKey: structpb.NewStructValue(scores)}}
	if err := srv.Send(&extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
			ClearRouteCache: true,
			HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
				{Header: &corev3.HeaderValue{Key: DestinationHeader, RawValue: []byte(dest + ",10.9.9.9:1")}}}},
		}}},
		DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{lbNamespace: structpb.NewStructValue(lb)}},
	}); err != nil {
		return err
	}
	// The picker may rewrite the body (a model name to its target); Envoy
	// forwards what it streams back.
	body = bytes.ReplaceAll(body, []byte(`"model": "m"`), []byte(`"model": "target"`))
	half := len(body) / 2
	for i, chunk := range [][]byte{body[:half], body[half:]} {
		if err := srv.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{
			Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
				StreamedResponse: &extprocv3.StreamedBodyResponse{Body: chunk, EndOfStream: i == 1}}}}}}}); err != nil {
			return err
		}
	}
	req, err = srv.Recv()
	if err != nil {
		return err
	}
	rh := req.GetResponseHeaders()
	if rh == nil {
		f.fail("after the routing decision: want the response headers, got %v", req)
		return nil
	}
	f.mu.Lock()
	f.statuses = append(f.statuses, header(rh, ":status"))
	f.mu.Unlock()
	req, err = srv.Recv()
	if err != nil {
		return err
	}
	if rb := req.GetResponseBody(); rb == nil || !rb.GetEndOfStream() || len(rb.GetBody()) == 0 {
		f.fail("want the whole response body with end of stream, got %v", req)
		return nil
	}
	if err := srv.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{}}}); err != nil {
		return err
	}
	return srv.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{
		Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
			StreamedResponse: &extprocv3.StreamedBodyResponse{Body: []byte("{}"), EndOfStream: true}}}}}}})
}

// startPicker serves f over an in-memory connection.
func startPicker(t *testing.T, f *fakePicker) extprocv3.ExternalProcessorClient {
	t.Helper()
	ln := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(srv, f)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///picker", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return extprocv3.NewExternalProcessorClient(conn)
}

func (f *fakePicker) check(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.protoErr {
		t.Error("picker saw:", e)
	}
}

func TestExchange(t *testing.T) {
	f := &fakePicker{pick: func([]byte) string { return "10.0.0.2:8000" }}
	client := startPicker(t, f)
	body := []byte(`{"model": "m", "prompt": "Hello there", "max_tokens": 1}`)
	var gotEndpoint, gotPath string
	var gotBody []byte
	d, err := Exchange(context.Background(), client, "r1", "/v1/completions", body,
		func(_ context.Context, endpoint, path string, b []byte) (Response, error) {
			gotEndpoint, gotPath, gotBody = endpoint, path, b
			return Response{Status: 200, ContentType: "application/json", Body: []byte(`{"ok": true}`)}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	f.check(t)
	want := `{"model": "target", "prompt": "Hello there", "max_tokens": 1}`
	if d.Endpoint != "10.0.0.2:8000" || gotEndpoint != d.Endpoint || gotPath != "/v1/completions" || string(gotBody) != want {
		t.Errorf("routed to %q (upstream %q %q), body %q; want 10.0.0.2:8000, the path and the body the picker streamed back",
			d.Endpoint, gotEndpoint, gotPath, gotBody)
	}
	if d.Scores["10.0.0.2:8000"] != 7 || d.Scores["10.9.9.9:1"] != 4 || len(d.Scores) != 2 {
		t.Errorf("scores %v, want 10.0.0.2:8000=7 10.9.9.9:1=4", d.Scores)
	}
	if string(d.Response.Body) != `{"ok": true}` || len(f.statuses) != 1 || f.statuses[0] != "200" {
		t.Errorf("response %q, the picker saw :status %q", d.Response.Body, f.statuses)
	}
}

func TestExchangeImmediateResponse(t *testing.T) {
	f := &fakePicker{pick: func([]byte) string { return "" }}
	called := false
	_, err := Exchange(context.Background(), startPicker(t, f), "r1", "/v1/nope", []byte(`{}`),
		func(context.Context, string, string, []byte) (Response, error) { called = true; return Response{}, nil })
	if !errors.Is(err, ErrImmediate) || !strings.Contains(err.Error(), "400 no") || called {
		t.Errorf("got %v (upstream called: %t), want ErrImmediate with 400 and the body, and no upstream request", err, called)
	}
	f.check(t)
}

// fakeReplica answers /v1/completions as sglmock with --enable-cache-report
// does for a 100-token prompt: 90 tokens cached once it has seen the
// prompt, and no prompt_tokens_details before.
func fakeReplica(t *testing.T) string {
	t.Helper()
	var mu sync.Mutex
	seen := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req struct{ Prompt string }
		json.Unmarshal(b, &req)
		mu.Lock()
		hit := seen[req.Prompt]
		seen[req.Prompt] = true
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if hit {
			fmt.Fprint(w, `{"usage": {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 90}}}`)
		} else {
			fmt.Fprint(w, `{"usage": {"prompt_tokens": 100, "prompt_tokens_details": null}}`)
		}
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// Route's figures through a picker that keeps each prompt on one replica
// (every repeat a hit), and through one that never sends a prompt where it
// went before (no hit, and never a cached token to report).
func TestRoute(t *testing.T) {
	prompts := Prompts(4, 20, 7)
	index := func(body []byte) int {
		var req struct{ Prompt string }
		json.Unmarshal(body, &req)
		for i, p := range prompts {
			if p == req.Prompt {
				return i
			}
		}
		return -1
	}
	sent := map[int]int{}
	for _, tt := range []struct {
		name     string
		pick     func(b []byte) int // the replica's index
		want     RouteFigures
		perFirst []int // first sends per replica, by index
	}{
		{"affinity", func(b []byte) int { return index(b) % 3 }, RouteFigures{
			Requests: 12, Repeats: 8, RepeatHits: 8, RepeatPromptTokens: 800, RepeatCached: 720, FirstPromptTokens: 400,
			Replicas: 3, CacheReported: true}, []int{2, 1, 1}},
		{"always elsewhere", func(b []byte) int { p := index(b); sent[p]++; return (p + sent[p]) % 3 }, RouteFigures{
			Requests: 12, Repeats: 8, RepeatHits: 0, RepeatPromptTokens: 800, RepeatCached: 0, FirstPromptTokens: 400,
			Replicas: 3, CacheReported: false}, []int{1, 2, 1}},
	} {
		replicas := []string{fakeReplica(t), fakeReplica(t), fakeReplica(t)} // none has seen the prompts
		f := &fakePicker{pick: func(b []byte) string { return replicas[tt.pick(b)] }}
		r := &Runner{EPP: startPicker(t, f), HTTP: http.DefaultClient, Model: "m", Replicas: replicas}
		sends, err := r.Route(context.Background(), prompts, 3, 1)
		if err != nil {
			t.Fatal(err)
		}
		f.check(t)
		got := routeFigures(sends, 3)
		got.LatencyMedian, got.LatencyMax = 0, 0 // wall time
		tt.want.FirstPerReplica = map[string]int{}
		for i, n := range tt.perFirst {
			tt.want.FirstPerReplica[replicas[i]] = n
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.name, got, tt.want)
		}
	}
}
