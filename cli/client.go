package cli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tokenlimit/tokenlimit/internal/httpx"
)

// clientFlags are the options of the commands that talk to a server.
type clientFlags struct {
	server      string
	descriptors []string
	cost        int64
	adminToken  string
	limit       string
}

func (f *clientFlags) register(cmd *cobra.Command, admin bool) {
	fl := cmd.Flags()
	fl.StringVar(&f.server, "server", "http://127.0.0.1:8080", "the tokenlimit server's base URL")
	fl.StringArrayVarP(&f.descriptors, "descriptor", "d", nil, "a descriptor name=value, such as user=alice (repeatable)")
	if admin {
		fl.StringVar(&f.adminToken, "admin-token", "", "the server's admin token (default $TOKENLIMIT_ADMIN_TOKEN)")
	}
}

func checkCommand() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "check -d name=value...",
		Short: "Ask a running server to decide (and charge) one request; exit status 0 allowed, 1 denied, 3 unreachable",
		Long: `Ask a running server to decide (and charge) one request, and print its answer.
Exit status: 0 allowed, 1 denied (429), 2 a bad request or flag (the server
answered 4xx), 3 no decision (the server is unreachable, timed out, or
answered 5xx such as 503 while a fail-closed limit cannot be decided).`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.call(cmd, "/v1/check", map[string]any{"cost": f.cost}, http.StatusOK)
		},
	}
	f.register(cmd, false)
	cmd.Flags().Int64Var(&f.cost, "cost", 0, "the request's own cost (0 means 1)")
	return cmd
}

func inspectCommand() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "inspect -d name=value...",
		Short: "Show the live state of the budgets a request selects, without charging",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.call(cmd, "/v1/admin/inspect", map[string]any{}, http.StatusOK)
		},
	}
	f.register(cmd, true)
	return cmd
}

func resetCommand() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "reset -d name=value... [--limit NAME]",
		Short: "Make whole the budgets a request selects (all, or one limit's)",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			body := map[string]any{}
			if f.limit != "" {
				body["limit"] = f.limit
			}
			return f.call(cmd, "/v1/admin/reset", body, http.StatusOK)
		},
	}
	f.register(cmd, true)
	cmd.Flags().StringVar(&f.limit, "limit", "", "reset only this limit's budget")
	return cmd
}

// call posts body plus the descriptors to path, prints the answer and
// returns an error unless the status is want.
func (f *clientFlags) call(cmd *cobra.Command, path string, body map[string]any, want int) error {
	desc, err := parseDescriptors(f.descriptors)
	if err != nil {
		return err
	}
	body["descriptors"] = desc
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(f.server, "/")+path, bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("--server %q: %w", f.server, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if strings.HasPrefix(path, "/v1/admin/") {
		if err := setAdminToken(req, f.adminToken); err != nil {
			return err
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return &exitError{ExitUnreachable, fmt.Errorf("--server %s: no answer: %w", f.server, err)}
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, answer, "", "  ") != nil {
		pretty.Write(answer)
	}
	fmt.Fprintln(cmd.OutOrStdout(), pretty.String())
	if resp.StatusCode != want {
		return &exitError{statusExit(resp.StatusCode), fmt.Errorf("%s answered %s", path, resp.Status)}
	}
	return nil
}

// statusExit is the exit status for an answer other than 200: 1 denied
// (429), 2 refused as asked (another 4xx), 3 no decision (5xx, or anything
// else).
func statusExit(status int) int {
	switch {
	case status == http.StatusTooManyRequests:
		return ExitDenied
	case status >= 400 && status < 500:
		return ExitUsage
	}
	return ExitUnreachable
}

// setAdminToken sets req's Authorization to the admin token of a client's
// --admin-token value, else $TOKENLIMIT_ADMIN_TOKEN: TOKEN, or the TOKEN of
// NAME:TOKEN (httpx.AdminBearer). None sets nothing.
func setAdminToken(req *http.Request, value string) error {
	token, err := httpx.AdminBearer(cmp.Or(value, os.Getenv("TOKENLIMIT_ADMIN_TOKEN")))
	if err != nil {
		return &exitError{ExitUsage, err}
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return nil
}

func parseDescriptors(pairs []string) (map[string]string, error) {
	out := make(map[string]string, len(pairs))
	for _, p := range pairs {
		name, value, ok := strings.Cut(p, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("--descriptor %q: want name=value, such as user=alice: %w", p, errUsage)
		}
		out[name] = value
	}
	return out, nil
}
