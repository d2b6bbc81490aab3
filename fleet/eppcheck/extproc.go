package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// DestinationHeader is the header the endpoint picker sets to the chosen
// endpoint, host:port; Envoy's ORIGINAL_DST cluster routes on it.
const DestinationHeader = "x-gateway-destination-endpoint"

// The dynamic metadata the picker attaches to its header response: the
// namespace, and the scores key (with --emit-endpoint-scores).
const (
	lbNamespace = "envoy.lb"
	scoresKey   = "x-gateway-destination-endpoint-scores"
)

// Upstream is what Envoy does between the request and the response
// phases: send the request, as the picker let it through, to the endpoint
// it chose.
type Upstream func(ctx context.Context, endpoint, path string, body []byte) (Response, error)

// Response is the upstream's answer, which goes back through the picker.
type Response struct {
	Status      int
	ContentType string
	Body        []byte
}

// Decision is what the picker decided for one request.
type Decision struct {
	Endpoint string             // the first of DestinationHeader's endpoints
	Scores   map[string]float64 // each endpoint's total score, when emitted
	Latency  time.Duration      // from the request headers to the last request body response
	Response Response
}

// ErrImmediate is an ImmediateResponse from the picker: it refused the
// request (an unknown path, a bad body, no endpoint).
var ErrImmediate = errors.New("the endpoint picker answered with an ImmediateResponse")

// Exchange runs one HTTP request through the endpoint picker's ext_proc
// stream as Envoy does with the processing mode the picker needs
// (headers SEND, bodies FULL_DUPLEX_STREAMED, trailers SEND): the request
// headers without end of stream, the whole body with end of stream; then
// the picker's header response (the destination header, the envoy.lb
// metadata) and its streamed body responses up to end of stream, which
// carry the body Envoy forwards; then the upstream request, and its
// response headers and body back through the picker, so its response
// hooks run, to the end of its stream.
func Exchange(ctx context.Context, client extprocv3.ExternalProcessorClient, requestID, path string, body []byte, upstream Upstream) (Decision, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.Process(ctx)
	if err != nil {
		return Decision{}, err
	}
	start := time.Now()
	if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: headerMap(
			":method", "POST", ":path", path, ":authority", "sglmock-fleet", ":scheme", "http",
			"content-type", "application/json", "content-length", strconv.Itoa(len(body)), "x-request-id", requestID,
		)},
	}}); err != nil {
		return Decision{}, fmt.Errorf("request headers: %w", err)
	}
	if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true},
	}}); err != nil {
		return Decision{}, fmt.Errorf("request body: %w", err)
	}

	var d Decision
	var forwarded []byte
	mutated := false
	for gotHeaders, bodyDone := false, false; !gotHeaders || !bodyDone; {
		resp, err := stream.Recv()
		if err != nil {
			return d, fmt.Errorf("waiting for the routing decision: %w", err)
		}
		switch r := resp.Response.(type) {
		case *extprocv3.ProcessingResponse_RequestHeaders:
			gotHeaders = true
			d.Endpoint, d.Scores = decision(r.RequestHeaders.GetResponse(), resp)
		case *extprocv3.ProcessingResponse_RequestBody:
			chunk, eos, ok := streamedBody(r.RequestBody.GetResponse())
			forwarded, mutated = append(forwarded, chunk...), mutated || ok
			bodyDone = bodyDone || eos
		case *extprocv3.ProcessingResponse_ImmediateResponse:
			ir := r.ImmediateResponse
			return d, fmt.Errorf("%w: %d %s", ErrImmediate, ir.GetStatus().GetCode(), ir.GetBody())
		default:
			return d, fmt.Errorf("unexpected %T before the request was routed", r)
		}
	}
	d.Latency = time.Since(start)
	if d.Endpoint == "" {
		return d, fmt.Errorf("the header response set no %s", DestinationHeader)
	}

	if !mutated {
		forwarded = body // passed through as sent
	}
	up, err := upstream(ctx, d.Endpoint, path, forwarded)
	if err != nil {
		return d, fmt.Errorf("upstream %s: %w", d.Endpoint, err)
	}
	d.Response = up
	if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: headerMap(
			":status", strconv.Itoa(up.Status), "content-type", up.ContentType, "content-length", strconv.Itoa(len(up.Body)),
		)},
	}}); err != nil {
		return d, fmt.Errorf("response headers: %w", err)
	}
	if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: up.Body, EndOfStream: true},
	}}); err != nil {
		return d, fmt.Errorf("response body: %w", err)
	}
	if err := stream.CloseSend(); err != nil {
		return d, err
	}
	// The picker answers the response headers, then the body to its end;
	// the stream ends after that.
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			return d, nil
		}
		if err != nil {
			return d, fmt.Errorf("response phase: %w", err)
		}
		if ir, ok := resp.Response.(*extprocv3.ProcessingResponse_ImmediateResponse); ok {
			return d, fmt.Errorf("%w in the response phase: %d", ErrImmediate, ir.ImmediateResponse.GetStatus().GetCode())
		}
		if r, ok := resp.Response.(*extprocv3.ProcessingResponse_ResponseBody); ok {
			if _, eos, _ := streamedBody(r.ResponseBody.GetResponse()); eos {
				return d, nil
			}
		}
	}
}

func headerMap(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

// decision reads the destination from the header mutation (the metadata
// carries the same endpoint) and the scores from the metadata.
func decision(cr *extprocv3.CommonResponse, resp *extprocv3.ProcessingResponse) (string, map[string]float64) {
	var endpoint string
	for _, h := range cr.GetHeaderMutation().GetSetHeaders() {
		if strings.EqualFold(h.GetHeader().GetKey(), DestinationHeader) {
			v := string(h.GetHeader().GetRawValue())
			if v == "" {
				v = h.GetHeader().GetValue()
			}
			endpoint, _, _ = strings.Cut(v, ",") // fallbacks follow a comma
		}
	}
	var scores map[string]float64
	lb := resp.GetDynamicMetadata().GetFields()[lbNamespace].GetStructValue()
	if s := lb.GetFields()[scoresKey].GetStructValue(); s != nil {
		scores = map[string]float64{}
		for k, v := range s.GetFields() {
			scores[k] = v.GetNumberValue()
		}
	}
	return endpoint, scores
}

// streamedBody is a body response's chunk in FULL_DUPLEX_STREAMED mode
// and whether it ends the body; a response with no streamed mutation
// (mutated false) passes the body through unchanged and ends it.
func streamedBody(cr *extprocv3.CommonResponse) (chunk []byte, eos, mutated bool) {
	sr := cr.GetBodyMutation().GetStreamedResponse()
	if sr == nil {
		return nil, true, false
	}
	return sr.GetBody(), sr.GetEndOfStream(), true
}
