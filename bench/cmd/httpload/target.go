package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/rueidis"
	"google.golang.org/grpc"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/bench/internal/servechild"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/memstore"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/rueidisclient"
	"github.com/tokenlimit/tokenlimit/server/httpapi"
	"github.com/tokenlimit/tokenlimit/server/rlsv3"
	"github.com/tokenlimit/tokenlimit/service"
)

// target is one running tokenlimit service under test, on loopback.
type target struct {
	httpAddr  string
	grpcAddr  string
	pprofAddr string // empty when the target serves no pprof
	pid       int    // the child's process id; 0 in process
	stop      func() error
}

// startChild runs `tokenlimit serve` as a child process with HTTP, gRPC and
// pprof on free loopback ports. With redisURL empty it serves the embedded
// store.
func startChild(ctx context.Context, bin, configPath, redisURL string) (*target, error) {
	args := []string{"serve", "--config", configPath, "--reload-every", "0",
		"--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0", "--pprof-listen", "127.0.0.1:0"}
	if redisURL != "" {
		args = append(args, "--redis", redisURL)
	}
	c, err := servechild.Start(ctx, bin, args, servechild.HTTP, servechild.GRPC, servechild.Pprof)
	if err != nil {
		return nil, err
	}
	t := &target{httpAddr: c.Addrs[servechild.HTTP], grpcAddr: c.Addrs[servechild.GRPC],
		pprofAddr: c.Addrs[servechild.Pprof], pid: c.Pid, stop: c.Stop}
	return t, waitHTTP(ctx, t.httpAddr)
}

// waitHTTP waits until GET /healthz answers 200.
func waitHTTP(ctx context.Context, addr string) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET /healthz: %s", resp.Status)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startInProcess builds the service like cli/serve.go does (service.New,
// httpapi.New on an HTTP server, rlsv3.Register on a gRPC server, the
// embedded store or rueidis onto redisAddr), on free loopback ports of this
// process. Logs go, as JSON at info level, to io.Discard. streamWorkers > 0
// serves gRPC calls on that many long-lived goroutines.
func startInProcess(cfg *config.Config, redisAddr string, streamWorkers int) (*target, error) {
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	var (
		store      tokenlimit.Store
		closeStore = func() {}
	)
	if redisAddr == "" {
		st, err := memstore.New(memstore.Options{})
		if err != nil {
			return nil, err
		}
		store = st
	} else {
		client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true})
		if err != nil {
			return nil, err
		}
		st, err := redisstore.New(rueidisclient.New(client), redisstore.Options{})
		if err != nil {
			client.Close()
			return nil, err
		}
		store, closeStore = st, client.Close
	}
	reg := prometheus.NewRegistry()
	svc, err := service.New(cfg, service.Options{
		Store: store, StoreTimeout: 50 * time.Millisecond,
		Registerer: reg, Logger: log,
	})
	if err != nil {
		closeStore()
		return nil, err
	}
	handler, err := httpapi.New(svc, httpapi.Options{Logger: log, Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})})
	if err != nil {
		closeStore()
		return nil, err
	}
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		closeStore()
		return nil, err
	}
	grpcLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		httpLn.Close()
		closeStore()
		return nil, err
	}
	httpSrv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	var grpcOpts []grpc.ServerOption
	if streamWorkers > 0 {
		grpcOpts = append(grpcOpts, grpc.NumStreamWorkers(uint32(streamWorkers)))
	}
	grpcSrv := grpc.NewServer(grpcOpts...)
	if err := rlsv3.Register(grpcSrv, svc, rlsv3.Options{Logger: log}); err != nil {
		httpLn.Close()
		grpcLn.Close()
		closeStore()
		return nil, err
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = httpSrv.Serve(httpLn) })
	wg.Go(func() { _ = grpcSrv.Serve(grpcLn) })
	stop := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := httpSrv.Shutdown(ctx)
		grpcSrv.GracefulStop()
		wg.Wait()
		closeStore()
		return err
	}
	return &target{httpAddr: httpLn.Addr().String(), grpcAddr: grpcLn.Addr().String(), stop: stop}, nil
}

// loadConfigFile reads the limits for the in-process target.
func loadConfigFile(path string) (*config.Config, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	return config.Load(path)
}
