// Package cli is tokenlimit's command line: `serve` runs the service,
// `validate` checks a configuration, and `check`, `inspect` and `reset` talk
// to a running server. Run is the whole program, testable without a process.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/tokenlimit/tokenlimit/config"
)

// Run runs the command line args (without the program name), writing to
// stdout and stderr, until the command ends or ctx is cancelled (a server
// then shuts down gracefully).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := &cobra.Command{
		Use:           "tokenlimit",
		Short:         "A token-level rate limiter for API and LLM gateways",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return fmt.Errorf("%w: %w", err, errUsage) })
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(serveCommand(), proxyCommand(), validateCommand(), checkCommand(), inspectCommand(), resetCommand(), teamsCommand(), keysCommand(), explainCommand(), benchCommand(), migrateCommand(), versionCommand(), healthCommand())
	return root.ExecuteContext(ctx)
}

func validateCommand() *cobra.Command {
	var envoyDir string
	var merge bool
	cmd := &cobra.Command{
		Use:   "validate FILE | validate --envoy-config DIR",
		Short: "Check a configuration file (or an envoyproxy/ratelimit directory); exit status 0 when it is valid",
		Args: func(cmd *cobra.Command, args []string) error {
			if envoyDir != "" {
				return exactArgs(0, "no FILE with --envoy-config")(cmd, args)
			}
			return exactArgs(1, "FILE")(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if envoyDir != "" {
				return validateEnvoy(cmd.OutOrStdout(), envoyDir, merge)
			}
			cfg, err := config.LoadWith(args[0], configOptions)
			if err != nil {
				return envoyHint(args[0], countErrors(args[0], err))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: valid, %s\n", args[0], count(len(cfg.Limits), "limit"))
			return nil
		},
	}
	cmd.Flags().StringVar(&envoyDir, "envoy-config", "", "check a directory of envoyproxy/ratelimit *.yaml files instead")
	cmd.Flags().BoolVar(&merge, "merge-domains", false, "with --envoy-config: let several files configure one domain (MERGE_DOMAIN_CONFIG)")
	return cmd
}

// countErrors puts "FILE: N errors:" on a line of its own above several
// errors of a configuration file (one a line, each naming its file and
// line), so that each starts a line whatever is written before the first
// (main's "tokenlimit: "); one error stays as it is. validate, serve and
// proxy report a bad file this way.
func countErrors(path string, err error) error {
	var list interface{ Unwrap() []error }
	if !errors.As(err, &list) || len(list.Unwrap()) < 2 {
		return err
	}
	return fmt.Errorf("%s: %s:\n%w", path, count(len(list.Unwrap()), "error"), err)
}

// count writes n and the noun, in the plural unless n is 1: "1 limit",
// "3 limits".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// exactArgs is cobra.ExactArgs with a message that names what is missing.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return fmt.Errorf("%s: want %s, got %d arguments: %w", cmd.Name(), names, len(args), errUsage)
		}
		return nil
	}
}

// errUsage marks a bad flag value; the message names the flag.
var errUsage = errors.New("usage")

// The exit statuses of the program (ExitCode maps Run's error to one).
const (
	ExitOK = 0
	// ExitDenied: check was denied; any other failure without a status of
	// its own (an invalid configuration, a server that failed) is 1 too.
	ExitDenied = 1
	// ExitUsage: a bad flag or argument, or a request the server refused
	// as asked (4xx other than 429).
	ExitUsage = 2
	// ExitUnreachable: the server could not be reached or did not decide
	// (a timeout, a 5xx such as 503 while a fail-closed limit cannot be
	// decided).
	ExitUnreachable = 3
)

// exitError is an error with its exit status.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// ExitCode is the exit status for Run's error: ExitOK for nil, the status an
// error carries, ExitUsage for a bad flag or argument, else 1.
func ExitCode(err error) int {
	var e *exitError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &e):
		return e.code
	case errors.Is(err, errUsage):
		return ExitUsage
	}
	return 1
}
