package cli

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"
)

// healthCommand is `tokenlimit health`: the container image's health check,
// which has no shell nor curl to ask a server with.
func healthCommand() *cobra.Command {
	var url string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Ask a server's health endpoint; exit status 0 when it answers 200 (the image's health check)",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			status, err := getStatus(ctx, url)
			if err != nil {
				return &exitError{ExitUnreachable, fmt.Errorf("health %s: %w", url, err)}
			}
			if status != http.StatusOK {
				return &exitError{ExitUnreachable, fmt.Errorf("health %s: HTTP %d %s", url, status, http.StatusText(status))}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: 200 OK\n", url)
			return nil
		},
	}
	cmd.Flags().StringVar(&url, "url", "http://127.0.0.1:8080/readyz", "the health endpoint: /readyz (the store answers) or /healthz (the process answers)")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "how long to wait for the answer")
	return cmd
}

// getStatus is the status of a GET of url, on a connection of its own: a
// health check keeps none, so it never reuses one the server has since
// closed.
func getStatus(ctx context.Context, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return resp.StatusCode, nil
}
