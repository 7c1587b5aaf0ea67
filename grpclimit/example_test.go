package grpclimit_test

import (
	"log"
	"net"
	"time"

	"google.golang.org/grpc"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/grpclimit"
	"github.com/tokenlimit/tokenlimit/memstore"
)

// Limit every api key (metadata x-api-key) to 100 calls a minute; calls
// without one share the budget "anonymous". (Compiled, not run: it serves
// until stopped; TestUnary runs the same wiring.)
func Example() {
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := tokenlimit.NewLimiter(store)
	if err != nil {
		log.Fatal(err)
	}
	in, err := grpclimit.New(limiter, tokenlimit.SlidingCounterLimit(100, time.Minute), grpclimit.Options{
		Name:       "calls",
		Key:        grpclimit.KeyFromMetadata("x-api-key"),
		DefaultKey: "anonymous",
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(in.Unary()), grpc.StreamInterceptor(in.Stream()))
	// Register services on srv here.
	lis, err := net.Listen("tcp", "127.0.0.1:50051")
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(srv.Serve(lis))
}
