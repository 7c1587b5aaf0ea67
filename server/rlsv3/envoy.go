package rlsv3

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/envoycompat"
	"github.com/tokenlimit/tokenlimit/resilient"
)

// RegisterEnvoyCompat registers the Rate Limit Service on s answering with
// envoyproxy/ratelimit's semantics (package envoycompat) instead of
// tokenlimit's own. An invalid request answers codes.Unknown with
// envoyproxy/ratelimit's message, as it does; a store failure answers
// codes.Unavailable, or, for a domain whose envoycompat.FailureMode is
// closed or open, OVER_LIMIT or OK with StoreHeader.
func RegisterEnvoyCompat(s *grpc.Server, e *envoycompat.Engine, opts Options) error {
	if s == nil || e == nil {
		return errors.New("rlsv3: RegisterEnvoyCompat needs a gRPC server and an engine")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	rlspb.RegisterRateLimitServiceServer(s, &compatServer{engine: e, log: opts.Logger})
	return nil
}

type compatServer struct {
	rlspb.UnimplementedRateLimitServiceServer
	engine *envoycompat.Engine
	log    *slog.Logger
}

var _ rlspb.RateLimitServiceServer = (*compatServer)(nil)

// ShouldRateLimit decides req with envoyproxy/ratelimit's semantics.
func (s *compatServer) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	resp, err := s.engine.ShouldRateLimit(ctx, compatRequest(req))
	switch {
	case errors.Is(err, envoycompat.ErrInvalidRequest):
		s.log.DebugContext(ctx, "rls: invalid request", "error", err)
		return nil, status.Error(codes.Unknown, err.Error())
	case ctx.Err() != nil:
		return nil, status.FromContextError(ctx.Err()).Err()
	case err != nil:
		s.log.Log(ctx, storeErrorLevel(err), "rls: store failed", "error", err)
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return compatResponse(resp), nil
}

// storeErrorLevel is the level a store error of a request is logged at:
// warn for a call that failed, debug for what is logged once per change
// elsewhere (serve logs the breaker opening and closing, and the store
// filling up and having room again): a call the open breaker skipped, a
// half-open trial confirming the outage, a full store.
func storeErrorLevel(err error) slog.Level {
	var fe *resilient.FailedError
	switch {
	case errors.Is(err, tokenlimit.ErrStoreFull), errors.Is(err, resilient.ErrBreakerOpen),
		errors.As(err, &fe) && fe.Trial:
		return slog.LevelDebug
	}
	return slog.LevelWarn
}

func compatRequest(req *rlspb.RateLimitRequest) envoycompat.Request {
	out := envoycompat.Request{Domain: req.GetDomain(), HitsAddend: req.GetHitsAddend(), Descriptors: make([]envoycompat.Descriptor, len(req.GetDescriptors()))}
	for i, d := range req.GetDescriptors() {
		cd := envoycompat.Descriptor{Entries: make([]envoycompat.Entry, len(d.GetEntries()))}
		for j, e := range d.GetEntries() {
			cd.Entries[j] = envoycompat.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		if h := d.GetHitsAddend(); h != nil {
			v := h.GetValue()
			cd.HitsAddend = &v
		}
		if l := d.GetLimit(); l != nil {
			cd.Limit = &envoycompat.Override{RequestsPerUnit: l.GetRequestsPerUnit(), Unit: envoycompat.Unit(l.GetUnit())}
		}
		out.Descriptors[i] = cd
	}
	return out
}

func compatResponse(r envoycompat.Response) *rlspb.RateLimitResponse {
	out := &rlspb.RateLimitResponse{
		OverallCode: rlspb.RateLimitResponse_Code(r.OverallCode),
		Statuses:    make([]*rlspb.RateLimitResponse_DescriptorStatus, len(r.Statuses)),
	}
	for i, st := range r.Statuses {
		ps := &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_Code(st.Code), LimitRemaining: st.LimitRemaining}
		if l := st.CurrentLimit; l != nil {
			ps.CurrentLimit = &rlspb.RateLimitResponse_RateLimit{Name: l.Name, RequestsPerUnit: l.RequestsPerUnit, Unit: rlspb.RateLimitResponse_RateLimit_Unit(l.Unit)}
		}
		if st.HasReset {
			ps.DurationUntilReset = durationpb.New(st.DurationUntilReset)
		}
		out.Statuses[i] = ps
	}
	for _, h := range r.Headers {
		out.ResponseHeadersToAdd = append(out.ResponseHeadersToAdd, &corepb.HeaderValue{Key: h.Key, Value: h.Value})
	}
	if r.StoreUnavailable {
		out.ResponseHeadersToAdd = append(out.ResponseHeadersToAdd, &corepb.HeaderValue{Key: StoreHeader, Value: StoreUnavailable})
		if r.OverallCode == envoycompat.OverLimit {
			out.RawBody = []byte("tokenlimit: the store is failing and this domain fails closed\n")
		}
	}
	return out
}

// maxJSONBody bounds a /json request body.
const maxJSONBody = 1 << 20

// JSONHandler serves envoyproxy/ratelimit's HTTP endpoint (mount it at
// POST /json): a RateLimitRequest in protobuf JSON in, the
// RateLimitResponse in protobuf JSON out, 200 when OK and 429 when over the
// limit. A body that is not a request, a request the service refuses and a
// store failure answer 400 "Bad Request", as envoyproxy/ratelimit does.
func JSONHandler(e *envoycompat.Engine, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
		var req rlspb.RateLimitRequest
		if err == nil {
			err = protojson.Unmarshal(body, &req)
		}
		if err != nil {
			log.DebugContext(r.Context(), "json: bad request", "error", err)
			http.Error(w, http.StatusText(http.StatusBadRequest), http.StatusBadRequest)
			return
		}
		resp, err := e.ShouldRateLimit(r.Context(), compatRequest(&req))
		if err != nil { // 400 for a store failure too, as envoyproxy/ratelimit answers
			if !errors.Is(err, envoycompat.ErrInvalidRequest) {
				log.Log(r.Context(), storeErrorLevel(err), "json: store failed", "error", err)
			}
			http.Error(w, http.StatusText(http.StatusBadRequest), http.StatusBadRequest)
			return
		}
		out, err := protojson.Marshal(compatResponse(resp))
		if err != nil {
			http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.OverallCode == envoycompat.OverLimit {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		w.Write(out)
	})
}
