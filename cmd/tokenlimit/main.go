// Command tokenlimit is the rate-limit service and its command-line tools;
// see `tokenlimit --help`. All the work happens in package cli.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/tokenlimit/tokenlimit/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "tokenlimit:", err)
		os.Exit(cli.ExitCode(err))
	}
}
