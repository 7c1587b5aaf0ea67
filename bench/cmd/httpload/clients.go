package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// userName is the user descriptor of user i.
func userName(i int) string { return "user-" + strconv.Itoa(i) }

// checkBody is the body of user i's POST /v1/check.
func checkBody(i int) []byte {
	return fmt.Appendf(nil, `{"descriptors":{"user":%q,"route":"/v1/chat"}}`, userName(i))
}

// statusResult maps an HTTP status to a decision: 200 allowed, 429 denied,
// anything else an error.
func statusResult(code int) (bool, error) {
	switch code {
	case http.StatusOK:
		return true, nil
	case http.StatusTooManyRequests:
		return false, nil
	}
	return false, fmt.Errorf("status %d", code)
}

// shared is a factory that hands every goroutine the same caller.
func shared(c caller) factory {
	return func() (caller, func()) { return c, func() {} }
}

// netHTTPCallers returns a caller of POST /v1/check on addr with
// {"descriptors": {"user": "user-i", "route": "/v1/chat"}}, over keep-alive
// HTTP/1.1 connections (up to conns idle ones kept), and a caller of GET
// /healthz (no decision: the floor of an HTTP round trip), through
// net/http's client.
func netHTTPCallers(addr string, users, conns int) (check, health caller, closeIdle func()) {
	tr := &http.Transport{
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	bodies := make([][]byte, users)
	for i := range bodies {
		bodies[i] = checkBody(i)
	}
	checkURL, healthURL := "http://"+addr+"/v1/check", "http://"+addr+"/healthz"
	do := func(req *http.Request) (bool, error) {
		resp, err := client.Do(req)
		if err != nil {
			return false, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return false, err
		}
		return statusResult(resp.StatusCode)
	}
	check = func(ctx context.Context, i int) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, checkURL, bytes.NewReader(bodies[i]))
		if err != nil {
			return false, err
		}
		req.Header.Set("Content-Type", "application/json")
		return do(req)
	}
	health = func(ctx context.Context, _ int) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, healthURL, nil)
		if err != nil {
			return false, err
		}
		return do(req)
	}
	return check, health, tr.CloseIdleConnections
}

// grpcCaller returns a caller of ShouldRateLimit on addr through the
// generated client over one HTTP/2 connection, with domain "llm" and one
// descriptor {user: user-i, route: /v1/chat}. OK is allowed, OVER_LIMIT
// denied.
func grpcCaller(addr string, users int) (caller, func() error, error) {
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	client := rlspb.NewRateLimitServiceClient(conn)
	reqs := make([]*rlspb.RateLimitRequest, users)
	for i := range reqs {
		reqs[i] = &rlspb.RateLimitRequest{
			Domain: "llm",
			Descriptors: []*commonpb.RateLimitDescriptor{{Entries: []*commonpb.RateLimitDescriptor_Entry{
				{Key: "user", Value: userName(i)},
				{Key: "route", Value: "/v1/chat"},
			}}},
		}
	}
	call := func(ctx context.Context, i int) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := client.ShouldRateLimit(ctx, reqs[i])
		if err != nil {
			return false, err
		}
		switch resp.GetOverallCode() {
		case rlspb.RateLimitResponse_OK:
			return true, nil
		case rlspb.RateLimitResponse_OVER_LIMIT:
			return false, nil
		}
		return false, fmt.Errorf("ShouldRateLimit: overall code %v", resp.GetOverallCode())
	}
	return call, conn.Close, nil
}
