package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// The quota plane's commands: tokenlimit teams ... and tokenlimit keys ...
// call a running server's /v1/admin/teams and /v1/admin/keys (docs/api.md)
// with the admin token, and print its JSON answers.

// adminClient calls a server's admin API; the same flags as check's.
type adminClient struct {
	server, adminToken string
}

func (c *adminClient) register(cmd *cobra.Command) {
	fl := cmd.PersistentFlags()
	fl.StringVar(&c.server, "server", "http://127.0.0.1:8080", "the tokenlimit server's base URL")
	fl.StringVar(&c.adminToken, "admin-token", "", "the server's admin token (default $TOKENLIMIT_ADMIN_TOKEN)")
}

// answer is a server's answer: its status, ETag and body.
type answer struct {
	status int
	etag   string
	body   []byte
}

// do sends method path with body (JSON, nil for none) and If-Match
// ifMatch (none when ""). An answer other than want is an error with the
// exit status statusExit gives it, naming the server's message.
func (c *adminClient) do(ctx context.Context, method, path string, body any, ifMatch string, want int) (answer, error) {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return answer{}, err
		}
		rd = bytes.NewReader(data)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.server, "/")+path, rd)
	if err != nil {
		return answer{}, fmt.Errorf("--server %q: %w", c.server, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if ifMatch != "" {
		req.Header.Set("If-Match", ifMatch)
	}
	if err := setAdminToken(req, c.adminToken); err != nil {
		return answer{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, &exitError{ExitUnreachable, fmt.Errorf("--server %s: no answer: %w", c.server, err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return answer{}, &exitError{ExitUnreachable, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)}
	}
	a := answer{status: resp.StatusCode, etag: resp.Header.Get("ETag"), body: data}
	if resp.StatusCode != want {
		return a, &exitError{statusExit(resp.StatusCode), fmt.Errorf("%s %s answered %s%s", method, path, resp.Status, serverMessage(data))}
	}
	return a, nil
}

// serverMessage is ": field: message" of an error answer, or "".
func serverMessage(data []byte) string {
	var e struct {
		Error struct{ Field, Message string } `json:"error"`
	}
	if json.Unmarshal(data, &e) != nil || e.Error.Message == "" {
		return ""
	}
	if e.Error.Field != "" {
		return ": " + e.Error.Field + ": " + e.Error.Message
	}
	return ": " + e.Error.Message
}

// printJSON writes data indented, or as it is if it is not JSON.
func printJSON(w io.Writer, data []byte) {
	var pretty bytes.Buffer
	if json.Indent(&pretty, data, "", "  ") != nil {
		pretty.Reset()
		pretty.Write(data)
	}
	fmt.Fprintln(w, strings.TrimRight(pretty.String(), "\n"))
}

// listAll reads every page of a list (GET path?query&after=...), returning
// the records of the field named field.
func (c *adminClient) listAll(ctx context.Context, path string, query url.Values, field string) ([]json.RawMessage, error) {
	var all []json.RawMessage
	query.Set("limit", "1000")
	for {
		a, err := c.do(ctx, http.MethodGet, path+"?"+query.Encode(), nil, "", http.StatusOK)
		if err != nil {
			return nil, err
		}
		var page map[string]json.RawMessage
		if err := json.Unmarshal(a.body, &page); err != nil {
			return nil, fmt.Errorf("GET %s: not a list: %w", path, err)
		}
		var records []json.RawMessage
		if err := json.Unmarshal(page[field], &records); err != nil {
			return nil, fmt.Errorf("GET %s: %s: %w", path, field, err)
		}
		all = append(all, records...)
		var next string
		if page["next"] == nil || json.Unmarshal(page["next"], &next) != nil || next == "" {
			return all, nil
		}
		query.Set("after", next)
	}
}

// specFlags are a team's or key's fields as flags of create and update.
type specFlags struct {
	plan, team, expiresAt, limits string
	labels                        []string
	disabled                      bool
}

func (f *specFlags) register(cmd *cobra.Command, key bool) {
	fl := cmd.Flags()
	fl.StringVar(&f.plan, "plan", "", "the plan, one of the configuration's")
	if key {
		fl.StringVar(&f.team, "team", "", "the team the key belongs to (its name)")
		fl.StringVar(&f.expiresAt, "expires-at", "", "when the key stops working, RFC 3339 (such as 2027-01-01T00:00:00Z)")
	}
	fl.StringArrayVar(&f.labels, "label", nil, "a label name=value (repeatable)")
	fl.StringVar(&f.limits, "limits", "", "its own limits: a JSON array of limits as in the YAML file (without key and match), or @FILE holding one")
	fl.BoolVar(&f.disabled, "disabled", false, "disabled: refused until enabled again")
}

// apply sets in spec the fields whose flags cmd was given.
func (f *specFlags) apply(cmd *cobra.Command, spec map[string]any) error {
	changed := cmd.Flags().Changed
	for flag, v := range map[string]string{"plan": f.plan, "team": f.team, "expires-at": f.expiresAt} {
		if changed(flag) {
			spec[strings.ReplaceAll(flag, "-", "_")] = v
		}
	}
	if changed("disabled") {
		spec["disabled"] = f.disabled
	}
	if changed("label") {
		labels := map[string]string{}
		for _, l := range f.labels {
			name, value, ok := strings.Cut(l, "=")
			if !ok || name == "" {
				return fmt.Errorf("--label %q: want name=value, such as env=prod: %w", l, errUsage)
			}
			labels[name] = value
		}
		spec["labels"] = labels
	}
	if changed("limits") {
		data := []byte(f.limits)
		if path, ok := strings.CutPrefix(f.limits, "@"); ok {
			var err error
			if data, err = os.ReadFile(path); err != nil {
				return fmt.Errorf("--limits: %w", err)
			}
		}
		var limits []json.RawMessage
		if err := json.Unmarshal(data, &limits); err != nil {
			return fmt.Errorf("--limits: want a JSON array of limits: %v: %w", err, errUsage)
		}
		spec["limits"] = limits
	}
	return nil
}

// planeKind is "teams" or "keys": the path under /v1/admin/ and the field
// of its list.
type planeKind string

func (k planeKind) path(id string) string {
	p := "/v1/admin/" + string(k)
	if id != "" {
		p += "/" + url.PathEscape(id)
	}
	return p
}

func (k planeKind) singular() string { return strings.TrimSuffix(string(k), "s") }

func teamsCommand() *cobra.Command {
	var c adminClient
	cmd := &cobra.Command{
		Use:   "teams",
		Short: "Manage the quota plane's teams on a running server (create, list, show, update, delete)",
	}
	c.register(cmd)
	cmd.AddCommand(createCommand(&c, "teams"), listCommand(&c, "teams"), showCommand(&c, "teams"), updateCommand(&c, "teams"),
		removeCommand(&c, "teams", "delete", "Delete a team that has no keys left"))
	return cmd
}

func keysCommand() *cobra.Command {
	var c adminClient
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Manage the quota plane's api keys on a running server (create, list, show, update, rotate, revoke, export, import)",
	}
	c.register(cmd)
	cmd.AddCommand(createCommand(&c, "keys"), listCommand(&c, "keys"), showCommand(&c, "keys"), updateCommand(&c, "keys"),
		rotateCommand(&c), removeCommand(&c, "keys", "revoke", "Revoke a key: refused from now on, on every replica"),
		exportCommand(&c), importCommand(&c))
	return cmd
}

func createCommand(c *adminClient, kind planeKind) *cobra.Command {
	var f specFlags
	short := "Create a team"
	if kind == "keys" {
		short = "Create an api key and print its secret, shown this once"
	}
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: short,
		Args:  exactArgs(1, "the "+kind.singular()+"'s name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec := map[string]any{"name": args[0]}
			if err := f.apply(cmd, spec); err != nil {
				return err
			}
			a, err := c.do(cmd.Context(), http.MethodPost, kind.path(""), spec, "", http.StatusCreated)
			printJSON(cmd.OutOrStdout(), a.body)
			return err
		},
	}
	f.register(cmd, kind == "keys")
	return cmd
}

func listCommand(c *adminClient, kind planeKind) *cobra.Command {
	var team, plan, label, disabled string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List every " + kind.singular() + " (all pages) as a JSON array",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := url.Values{}
			for name, v := range map[string]string{"team": team, "plan": plan, "label": label, "disabled": disabled} {
				if v != "" {
					q.Set(name, v)
				}
			}
			records, err := c.listAll(cmd.Context(), kind.path(""), q, string(kind))
			if err != nil {
				return err
			}
			data, err := json.Marshal(records)
			if err != nil {
				return err
			}
			printJSON(cmd.OutOrStdout(), data)
			return nil
		},
	}
	if kind == "keys" {
		fl := cmd.Flags()
		fl.StringVar(&team, "team", "", "only the keys of this team")
		fl.StringVar(&plan, "plan", "", "only the keys on this plan")
		fl.StringVar(&label, "label", "", "only the keys with this label, name=value")
		fl.StringVar(&disabled, "disabled", "", "only the disabled keys (true) or the enabled ones (false)")
	}
	return cmd
}

func showCommand(c *adminClient, kind planeKind) *cobra.Command {
	var usage bool
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show a " + kind.singular(),
		Args:  exactArgs(1, "the "+kind.singular()+"'s id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := kind.path(args[0])
			if usage {
				path += "/usage"
			}
			a, err := c.do(cmd.Context(), http.MethodGet, path, nil, "", http.StatusOK)
			printJSON(cmd.OutOrStdout(), a.body)
			return err
		},
	}
	if kind == "keys" {
		cmd.Flags().BoolVar(&usage, "usage", false, "show the key's usage instead: every limit that applies to it, with used, remaining and reset")
	}
	return cmd
}

// updateCommand reads the record, changes the fields whose flags are
// given and writes it back under If-Match, so that an edit made meanwhile
// is never silently lost (the server answers 412 and nothing changes).
func updateCommand(c *adminClient, kind planeKind) *cobra.Command {
	var f specFlags
	var name string
	cmd := &cobra.Command{
		Use:   "update ID [--plan P] [--label k=v]... [--limits JSON] [--disabled=true|false]",
		Short: "Change some fields of a " + kind.singular() + ", keeping the others",
		Args:  exactArgs(1, "the "+kind.singular()+"'s id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := kind.path(args[0])
			cur, err := c.do(cmd.Context(), http.MethodGet, path, nil, "", http.StatusOK)
			if err != nil {
				return err
			}
			spec, err := specOf(cur.body)
			if err != nil {
				return fmt.Errorf("GET %s: %w", path, err)
			}
			if cmd.Flags().Changed("name") {
				spec["name"] = name
			}
			if err := f.apply(cmd, spec); err != nil {
				return err
			}
			a, err := c.do(cmd.Context(), http.MethodPut, path, spec, cur.etag, http.StatusOK)
			printJSON(cmd.OutOrStdout(), a.body)
			if a.status == http.StatusPreconditionFailed {
				return &exitError{ExitUsage, fmt.Errorf("the %s changed while it was being updated; nothing was written: run the command again", kind.singular())}
			}
			return err
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "a new name")
	f.register(cmd, kind == "keys")
	return cmd
}

// specFields are the fields of a record that a create or update takes.
var specFields = []string{"name", "team", "plan", "labels", "expires_at", "disabled", "limits"}

// specOf is the writable part of a record as the admin API answers it.
func specOf(record []byte) (map[string]any, error) {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(record, &all); err != nil {
		return nil, err
	}
	spec := map[string]any{}
	for _, f := range specFields {
		if v, ok := all[f]; ok {
			spec[f] = v
		}
	}
	return spec, nil
}

func rotateCommand(c *adminClient) *cobra.Command {
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "rotate ID [--grace 1h]",
		Short: "Issue a key a new secret, printed this once; the old one stays valid for --grace",
		Args:  exactArgs(1, "the key's id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := c.do(cmd.Context(), http.MethodPost, planeKind("keys").path(args[0])+"/rotate", map[string]string{"grace": grace.String()}, "", http.StatusOK)
			printJSON(cmd.OutOrStdout(), a.body)
			return err
		},
	}
	cmd.Flags().DurationVar(&grace, "grace", 0, "how long the replaced secret is still accepted (0 to 720h)")
	return cmd
}

func removeCommand(c *adminClient, kind planeKind, verb, short string) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " ID",
		Short: short,
		Args:  exactArgs(1, "the "+kind.singular()+"'s id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := c.do(cmd.Context(), http.MethodDelete, kind.path(args[0]), nil, "", http.StatusNoContent)
			if err != nil {
				printJSON(cmd.OutOrStdout(), a.body)
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: done\n", verb, args[0])
			return nil
		},
	}
}

// exportDoc is what keys export writes and keys import reads: every team
// and key with its fields, never a secret (the server keeps only their
// digests and never answers those either).
type exportDoc struct {
	Version int               `json:"version"`
	Teams   []json.RawMessage `json:"teams"`
	Keys    []json.RawMessage `json:"keys"`
}

// exportVersion is the format of exportDoc.
const exportVersion = 1

func exportCommand(c *adminClient) *cobra.Command {
	return &cobra.Command{
		Use:   "export",
		Short: "Write every team and key as JSON, without secrets, for backup and migration",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			doc := exportDoc{Version: exportVersion}
			var err error
			if doc.Teams, err = c.listAll(cmd.Context(), "/v1/admin/teams", url.Values{}, "teams"); err != nil {
				return err
			}
			if doc.Keys, err = c.listAll(cmd.Context(), "/v1/admin/keys", url.Values{}, "keys"); err != nil {
				return err
			}
			data, err := json.Marshal(doc)
			if err != nil {
				return err
			}
			printJSON(cmd.OutOrStdout(), data)
			return nil
		},
	}
}

// importedKey is one key created by keys import, with its new secret.
type importedKey struct {
	Name   string `json:"name"`
	ID     string `json:"id"`
	Secret string `json:"secret"`
}

func importCommand(c *adminClient) *cobra.Command {
	return &cobra.Command{
		Use:   "import FILE",
		Short: "Create the teams and keys of an export (- for stdin); prints each new key's secret, since an export holds none",
		Long: `Create the teams, then the keys, of a file written by keys export ("-" reads
stdin), with their fields as exported. A team whose name exists, or a key whose
team and name one has, is skipped and said so. An export holds no secrets, so every key created gets a
new secret: they are printed, as JSON, once; hand them to their users.`,
		Args: exactArgs(1, "the export file"),
		RunE: func(cmd *cobra.Command, args []string) error {
			doc, err := readExport(cmd, args[0])
			if err != nil {
				return err
			}
			teams := 0
			for _, t := range doc.Teams {
				a, err := c.importOne(cmd, "teams", t, nil)
				if err != nil {
					return err
				}
				if a.status == http.StatusCreated {
					teams++
				}
			}
			exists, err := c.existing(cmd, "keys")
			if err != nil {
				return err
			}
			created := []importedKey{}
			for _, k := range doc.Keys {
				a, err := c.importOne(cmd, "keys", k, exists)
				if err != nil {
					return err
				}
				var ik importedKey
				if a.status == http.StatusCreated && json.Unmarshal(a.body, &ik) == nil {
					created = append(created, ik)
				}
			}
			data, err := json.Marshal(map[string]any{"teams_created": teams, "keys_created": created})
			if err != nil {
				return err
			}
			printJSON(cmd.OutOrStdout(), data)
			return nil
		},
	}
}

func readExport(cmd *cobra.Command, path string) (exportDoc, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(cmd.InOrStdin())
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return exportDoc{}, err
	}
	var doc exportDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		return exportDoc{}, fmt.Errorf("%s: not an export of tokenlimit keys export: %v: %w", path, err, errUsage)
	}
	if doc.Version != exportVersion {
		return exportDoc{}, fmt.Errorf("%s: version %d, want %d: %w", path, doc.Version, exportVersion, errUsage)
	}
	return doc, nil
}

// importOne creates one exported record unless exists says a record of
// its name (and team) is there, or the server answers 409 for its name:
// then it is skipped, said on stderr.
func (c *adminClient) importOne(cmd *cobra.Command, kind planeKind, record json.RawMessage, exists map[string]bool) (answer, error) {
	spec, err := specOf(record)
	if err != nil {
		return answer{}, fmt.Errorf("an exported %s: %v: %w", kind.singular(), err, errUsage)
	}
	id := identity(record)
	if exists[id] {
		fmt.Fprintf(cmd.ErrOrStderr(), "skipped %s %s: it exists\n", kind.singular(), id)
		return answer{}, nil
	}
	a, err := c.do(cmd.Context(), http.MethodPost, kind.path(""), spec, "", http.StatusCreated)
	var ee *exitError
	if a.status == http.StatusConflict && errors.As(err, &ee) {
		fmt.Fprintf(cmd.ErrOrStderr(), "skipped %s %s: it exists\n", kind.singular(), id)
		return a, nil
	}
	return a, err
}

// identity names a record for import: its team's name, if any, and its
// own, as "team/name" (key names are unique only within a team, if at all).
func identity(record json.RawMessage) string {
	var r struct{ Name, Team string }
	_ = json.Unmarshal(record, &r)
	return strconv.Quote(r.Team + "/" + r.Name)
}

// existing is the identities of the records of kind on the server.
func (c *adminClient) existing(cmd *cobra.Command, kind planeKind) (map[string]bool, error) {
	records, err := c.listAll(cmd.Context(), kind.path(""), url.Values{}, string(kind))
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(records))
	for _, r := range records {
		out[identity(r)] = true
	}
	return out, nil
}
