package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/tokenlimit/tokenlimit/internal/logging"
	"github.com/tokenlimit/tokenlimit/server/rlsv3"
)

// rlsServiceName is the Rate Limit Service's full gRPC name.
const rlsServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// healthPoll is how often a Watch of the health service looks for a change.
const healthPoll = time.Second

// grpcStreamWorkers is how many long-lived goroutines serve gRPC streams.
// Without them each RPC runs on a fresh goroutine whose small stack grows
// (and is copied) in the deep store call; with them a stack grows once. A
// decision waiting on Redis holds its worker, so there are enough for many
// concurrent callers; beyond them gRPC starts goroutines as before.
const grpcStreamWorkers = 256

// listenGRPC serves gRPC on addr: the services register adds, server
// reflection, and grpc.health.v1.Health, SERVING while ready reports true.
// A serve error ends the program through fail.
func listenGRPC(addr string, log *slog.Logger, fail context.CancelCauseFunc, ready func(context.Context) bool, register func(*grpc.Server) error, opts ...grpc.ServerOption) (*grpc.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--grpc-listen %s: %w", addr, err)
	}
	// rlsv3's codec decodes rate-limit requests and encodes their answers
	// without protobuf's reflection; other messages go through protobuf.
	opts = append([]grpc.ServerOption{grpc.NumStreamWorkers(grpcStreamWorkers), grpc.ForceServerCodecV2(rlsv3.Codec()),
		grpc.ChainUnaryInterceptor(requestIDs)}, opts...)
	srv := grpc.NewServer(opts...)
	if err := register(srv); err != nil {
		ln.Close()
		return nil, err
	}
	healthpb.RegisterHealthServer(srv, &health{ready: ready})
	reflection.Register(srv)
	go func() { fail(ignoreClosed(srv.Serve(ln))) }()
	log.Info("serving gRPC (Envoy rate limit service v3)", "addr", ln.Addr().String(), "also", "grpc.health.v1.Health, server reflection")
	return srv, nil
}

// requestIDHeader is the metadata key of a gRPC call's request id, as
// X-Request-Id is HTTP's.
const requestIDHeader = "x-request-id"

// requestIDs gives every unary call an id, as HTTP requests have: the
// caller's x-request-id metadata when it is valid (see
// logging.ValidRequestID), a fresh one otherwise. The id is on every line
// logged with the call's context. It is sent back in the x-request-id
// response header when the caller sent it, and with every error, so that
// a failed call can be found in the logs; a fresh id is not sent back with
// an answer: Envoy, the usual caller, neither sends nor reads one, and the
// header costs about 8% of a decision's instructions (grpc-go indexes each
// new value in HPACK's dynamic table; envoycompare -callgrind: 88.9k
// against 81.7k per admitted decision, 77.9k against 70.7k over the
// limit).
func requestIDs(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	id, given := "", false
	if v := metadata.ValueFromIncomingContext(ctx, requestIDHeader); len(v) == 1 && logging.ValidRequestID(v[0]) {
		id, given = v[0], true
	} else {
		id = logging.NewRequestID()
	}
	resp, err := handler(logging.WithRequestID(ctx, id), req)
	if given || err != nil {
		_ = grpc.SetHeader(ctx, metadata.MD{requestIDHeader: {id}}) // fails only once headers were sent, which no unary handler does
	}
	return resp, err
}

// health is grpc.health.v1.Health for the whole server ("") and the Rate
// Limit Service, both SERVING while ready reports true and NOT_SERVING
// otherwise; any other service is NotFound.
type health struct {
	healthpb.UnimplementedHealthServer
	ready func(context.Context) bool
}

func (h *health) status(ctx context.Context, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	if service != "" && service != rlsServiceName {
		return 0, status.Errorf(codes.NotFound, "unknown service %q", service)
	}
	if h.ready(ctx) {
		return healthpb.HealthCheckResponse_SERVING, nil
	}
	return healthpb.HealthCheckResponse_NOT_SERVING, nil
}

// Check answers the current status.
func (h *health) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	st, err := h.status(ctx, req.GetService())
	if err != nil {
		return nil, err
	}
	return &healthpb.HealthCheckResponse{Status: st}, nil
}

// List answers the status of both services.
func (h *health) List(ctx context.Context, _ *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	st, _ := h.status(ctx, "")
	return &healthpb.HealthListResponse{Statuses: map[string]*healthpb.HealthCheckResponse{
		"": {Status: st}, rlsServiceName: {Status: st},
	}}, nil
}

// Watch sends the status now and then each time it changes (looked at
// every healthPoll), until the client goes away.
func (h *health) Watch(req *healthpb.HealthCheckRequest, stream grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	ctx := stream.Context()
	if req.GetService() != "" && req.GetService() != rlsServiceName {
		// As grpc-go's own health server: an unknown service is reported,
		// not refused, since it may be registered later.
		return stream.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVICE_UNKNOWN})
	}
	tick := time.NewTicker(healthPoll)
	defer tick.Stop()
	last := healthpb.HealthCheckResponse_UNKNOWN
	for {
		st, _ := h.status(ctx, req.GetService())
		if st != last {
			if err := stream.Send(&healthpb.HealthCheckResponse{Status: st}); err != nil {
				return err
			}
			last = st
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
