package cli

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tokenlimit/tokenlimit/config"
)

// explainCommand is tokenlimit explain KEY_ID: why a quota-plane key is
// (or would be) denied, as a table of every limit that applies to it
// (GET /v1/admin/keys/{id}/usage), the key's first, then its team's, then
// its plan's.
func explainCommand() *cobra.Command {
	var c adminClient
	cmd := &cobra.Command{
		Use:   "explain KEY_ID",
		Short: "Show every limit that applies to a quota-plane key, level by level: used, remaining, reset",
		Long: `Show every limit that applies to a quota-plane key, charging nothing: its
own, its team's and its plan's, each with what it counts, used of the limit,
remaining, and when it is whole again (usd in dollars). A limit with nothing
remaining is the one that denies the key's calls until its reset.
Exit status: 0, 2 no such key or a bad flag, 3 the server is unreachable.`,
		Args: exactArgs(1, "the key's id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := c.do(cmd.Context(), http.MethodGet, "/v1/admin/keys/"+url.PathEscape(args[0])+"/usage", nil, "", http.StatusOK)
			if err != nil {
				return err
			}
			var u keyUsage
			if err := json.Unmarshal(a.body, &u); err != nil {
				return fmt.Errorf("the server's usage of %s: %w", args[0], err)
			}
			return u.print(cmd.OutOrStdout())
		},
	}
	c.register(cmd)
	return cmd
}

// keyUsage is the answer of GET /v1/admin/keys/{id}/usage.
type keyUsage struct {
	ID     string          `json:"id"`
	Limits []keyUsageLimit `json:"limits"`
}

// keyUsageLimit is one limit of a keyUsage.
type keyUsageLimit struct {
	Level     string    `json:"level"`
	LevelName string    `json:"level_name"`
	Name      string    `json:"name"`
	Unit      string    `json:"unit"`
	Limit     int64     `json:"limit"`
	Used      int64     `json:"used"`
	Remaining int64     `json:"remaining"`
	Reset     time.Time `json:"reset"`
}

// levelRank orders the levels as precedence does: the key's, the team's,
// the plan's.
var levelRank = map[string]int{"key": 0, "team": 1, "plan": 2}

// print writes u as a table, one limit a line.
func (u keyUsage) print(w io.Writer) error {
	limits := slices.Clone(u.Limits)
	slices.SortStableFunc(limits, func(a, b keyUsageLimit) int { return cmp.Compare(levelRank[a.Level], levelRank[b.Level]) })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LEVEL\tNAME\tLIMIT\tUNIT\tUSED\tOF\tREMAINING\tRESET")
	for _, l := range limits {
		amount := func(n int64) string { return strconv.FormatInt(n, 10) }
		if l.Unit == "usd" {
			amount = func(n int64) string { return "$" + config.FormatUSD(n) }
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Level, cmp.Or(l.LevelName, "-"), l.Name, l.Unit,
			amount(l.Used), amount(l.Limit), amount(l.Remaining), l.Reset.UTC().Format(time.RFC3339))
	}
	return tw.Flush()
}
