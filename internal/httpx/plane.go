package httpx

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tokenlimit/tokenlimit/plane"
	"github.com/tokenlimit/tokenlimit/service"
)

// PlaneAdmin serves the quota plane's admin resources under /v1/admin/
// (teams, keys, a key's usage), each behind the admin gate. Every change
// is logged as one audit line naming who made it (the admin token's
// name), never a secret.
type PlaneAdmin struct {
	Plane   *plane.Plane
	Service *service.Service
	Gate    *AdminGate
	Log     *slog.Logger
	MaxBody int64
}

// Route is one path of an API, the methods it answers and its handler.
type Route struct {
	Path    string
	Methods []string
	Handler http.HandlerFunc
}

// Routes returns the plane's admin routes, each behind the gate.
func (a PlaneAdmin) Routes() []Route {
	const what = "admin endpoints"
	g := func(h http.HandlerFunc) http.HandlerFunc { return a.Gate.Wrap(what, h) }
	get, post, put, del := http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete
	return []Route{
		{"/v1/admin/teams", []string{get, post}, g(a.teams)},
		{"/v1/admin/teams/{id}", []string{get, put, del}, g(a.team)},
		{"/v1/admin/teams/{id}/usage", []string{get}, g(a.usage(a.Service.TeamUsage))},
		{"/v1/admin/keys", []string{get, post}, g(a.keys)},
		{"/v1/admin/keys/{id}", []string{get, put, del}, g(a.key)},
		{"/v1/admin/keys/{id}/rotate", []string{post}, g(a.rotate)},
		{"/v1/admin/keys/{id}/usage", []string{get}, g(a.usage(a.Service.KeyUsage))},
	}
}

// teamBody and keyBody are a team and a key as the admin API answers
// them: never a secret, nor its digest.
type teamBody struct {
	ID        string            `json:"id"`
	Name      string            `json:"name"`
	Plan      string            `json:"plan,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	Limits    json.RawMessage   `json:"limits,omitempty"`
	ExpiresAt *time.Time        `json:"expires_at,omitempty"`
	Disabled  bool              `json:"disabled"`
	Version   int64             `json:"version"`
	UpdatedAt time.Time         `json:"updated_at"`
}

type keyBody struct {
	teamBody
	Team string `json:"team,omitempty"`
	// Secret is set only in the answers of create and rotate.
	Secret string `json:"secret,omitempty"`
	// PreviousValidUntil is when the secret a rotation replaced stops
	// being accepted.
	PreviousValidUntil *time.Time `json:"previous_valid_until,omitempty"`
}

func commonBody(id string, c *plane.Common) teamBody {
	b := teamBody{ID: id, Name: c.Name, Plan: c.Plan, Labels: c.Labels, Limits: c.RawLimits, Disabled: c.Disabled, Version: c.Version, UpdatedAt: c.UpdatedAt}
	if !c.ExpiresAt.IsZero() {
		b.ExpiresAt = &c.ExpiresAt
	}
	return b
}

func teamOf(t *plane.Team) teamBody { return commonBody(t.ID, &t.Common) }

func keyOf(k *plane.Key) keyBody {
	b := keyBody{teamBody: commonBody(k.ID, &k.Common), Team: k.Team}
	if !k.PrevUntil.IsZero() {
		b.PreviousValidUntil = &k.PrevUntil
	}
	return b
}

func etag(version int64) string { return `"` + strconv.FormatInt(version, 10) + `"` }

// ifMatch reads If-Match: the version a write expects, AnyVersion when
// absent or "*".
func ifMatch(r *http.Request) (int64, *Error) {
	h := strings.TrimSpace(r.Header.Get("If-Match"))
	if h == "" || h == "*" {
		return plane.AnyVersion, nil
	}
	v, err := strconv.ParseInt(strings.Trim(strings.TrimPrefix(h, "W/"), `"`), 10, 64)
	if err != nil || v <= 0 {
		return 0, BadRequest("If-Match", "want an ETag this API answered, such as \"12\", got %q", h)
	}
	return v, nil
}

// planeError answers a plane error: 400 naming the field, 404, 409, 412, or
// 503 for a store that failed: saying that nothing changed, or, when the
// store's reply was lost and it could not tell, that the change may or may
// not have been applied and how to find out.
func (a PlaneAdmin) planeError(w http.ResponseWriter, r *http.Request, err error, conditional bool) {
	var fe *plane.FieldError
	var we *plane.WriteError
	var e *Error
	switch {
	case errors.As(err, &fe):
		e = BadRequest(fe.Field, "%s", fe.Reason)
	case errors.Is(err, plane.ErrNotFound):
		e = &Error{Status: http.StatusNotFound, Field: "id", Message: "no such " + kindOf(r)}
	case errors.Is(err, plane.ErrInUse):
		e = &Error{Status: http.StatusConflict, Field: "id", Message: "the team still has keys: delete or move them first"}
	case errors.Is(err, plane.ErrConflict) && conditional:
		e = &Error{Status: http.StatusPreconditionFailed, Field: "If-Match", Message: "the " + kindOf(r) + " changed since this version: read it again and retry"}
	case errors.Is(err, plane.ErrConflict) && r.Method == http.MethodPost && r.PathValue("id") == "":
		e = &Error{Status: http.StatusConflict, Field: "name", Message: "a " + kindOf(r) + " of this name exists"}
	case errors.Is(err, plane.ErrConflict):
		e = &Error{Status: http.StatusConflict, Message: "the " + kindOf(r) + " changed meanwhile: read it again and retry"}
	case errors.Is(err, plane.ErrOutcomeUnknown) && errors.As(err, &we):
		a.Log.ErrorContext(r.Context(), "plane: admin write's outcome unknown", "path", r.URL.Path, "error", err)
		e = &Error{Status: http.StatusServiceUnavailable, Message: unknownOutcome(r, we.Kind, we.ID)}
	default:
		a.Log.ErrorContext(r.Context(), "plane: admin write failed", "path", r.URL.Path, "error", err)
		e = &Error{Status: http.StatusServiceUnavailable, Message: "the plane's store failed; nothing changed, retry later"}
	}
	WriteError(w, e)
}

// unknownOutcome says that r's change of the record kind/id may or may not
// have been applied, and how to find out.
func unknownOutcome(r *http.Request, kind plane.Kind, id string) string {
	path := "/v1/admin/" + string(kind) + "s/" + id
	const lost = "the plane's store failed after the change was sent and could not tell whether it was applied: "
	switch {
	case r.Method == http.MethodPost && kind == plane.KindKey && r.PathValue("id") == "":
		return lost + "key " + id + " may or may not exist; GET " + path + " tells. If it exists, its secret was lost with this answer: revoke it (DELETE " + path + ") and create another"
	case r.Method == http.MethodPost && r.PathValue("id") == "":
		return lost + string(kind) + " " + strconv.Quote(id) + " may or may not exist; GET " + path + " tells"
	case r.Method == http.MethodPost:
		return lost + "key " + id + " may or may not have a new secret (GET " + path + " shows its version); rotate it again to get one"
	case r.Method == http.MethodDelete:
		return lost + string(kind) + " " + id + " may or may not be deleted; GET " + path + " answers 404 once it is, and DELETE again is safe"
	}
	return lost + "the change may or may not have been applied; GET " + path + " shows the " + string(kind) + " as it is, its ETag the version it has"
}

func kindOf(r *http.Request) string {
	if strings.HasPrefix(r.URL.Path, "/v1/admin/teams") {
		return "team"
	}
	return "key"
}

// written answers a change of a record with its new version as ETag and
// body, after its audit line.
func (a PlaneAdmin) written(w http.ResponseWriter, r *http.Request, status int, action, kind, id string, version int64, body any) {
	a.audit(r, action, kind, id, version)
	w.Header().Set("ETag", etag(version))
	WriteJSON(w, status, body)
}

// audit logs one change: who, what, which record, its new version.
func (a PlaneAdmin) audit(r *http.Request, action, kind, id string, version int64) {
	a.Log.InfoContext(r.Context(), "plane change", "who", AdminName(r.Context()), "action", action, "kind", kind, "id", id, "version", version)
}

func (a PlaneAdmin) teams(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		after, limit, e := page(r)
		if e != nil {
			WriteError(w, e)
			return
		}
		teams, next := a.Plane.ListTeams(after, limit)
		out := make([]teamBody, len(teams))
		for i, t := range teams {
			out[i] = teamOf(t)
		}
		WriteJSON(w, http.StatusOK, struct {
			Teams []teamBody `json:"teams"`
			Next  string     `json:"next,omitempty"`
		}{out, next})
		return
	}
	var s plane.Spec
	if e := Decode(w, r, a.MaxBody, &s); e != nil {
		WriteError(w, e)
		return
	}
	t, err := a.Plane.CreateTeam(r.Context(), s)
	if err != nil {
		a.planeError(w, r, err, false)
		return
	}
	w.Header().Set("Location", "/v1/admin/teams/"+t.ID)
	a.written(w, r, http.StatusCreated, "create", "team", t.ID, t.Version, teamOf(t))
}

func (a PlaneAdmin) team(w http.ResponseWriter, r *http.Request) {
	serveRecord(a, w, r, recordOps[*plane.Team, teamBody]{
		kind: "team", deleted: "delete",
		get: a.Plane.Team, update: a.Plane.UpdateTeam, remove: a.Plane.DeleteTeam,
		id: func(t *plane.Team) string { return t.ID }, version: func(t *plane.Team) int64 { return t.Version },
		body: teamOf,
	})
}

// recordOps are what GET, PUT and DELETE of one team or key need: the
// plane's calls for that kind of record and its answer's shape.
type recordOps[R any, B any] struct {
	kind    string // "team" or "key", for the audit line
	deleted string // the audit line's action for DELETE
	get     func(id string) (R, bool)
	update  func(ctx context.Context, id string, s plane.Spec, ifVersion int64) (R, error)
	remove  func(ctx context.Context, id string, ifVersion int64) error
	id      func(R) string
	version func(R) int64
	body    func(R) B
}

// serveRecord answers GET, PUT or DELETE of the record r's path names,
// with its version as ETag and If-Match as the version a write expects.
func serveRecord[R any, B any](a PlaneAdmin, w http.ResponseWriter, r *http.Request, ops recordOps[R, B]) {
	id := r.PathValue("id")
	version, e := ifMatch(r)
	if e != nil {
		WriteError(w, e)
		return
	}
	switch r.Method {
	case http.MethodGet:
		rec, ok := ops.get(id)
		if !ok {
			a.planeError(w, r, plane.ErrNotFound, false)
			return
		}
		w.Header().Set("ETag", etag(ops.version(rec)))
		WriteJSON(w, http.StatusOK, ops.body(rec))
	case http.MethodPut:
		var s plane.Spec
		if e := Decode(w, r, a.MaxBody, &s); e != nil {
			WriteError(w, e)
			return
		}
		rec, err := ops.update(r.Context(), id, s, version)
		if err != nil {
			a.planeError(w, r, err, version != plane.AnyVersion)
			return
		}
		a.written(w, r, http.StatusOK, "update", ops.kind, ops.id(rec), ops.version(rec), ops.body(rec))
	case http.MethodDelete:
		if err := ops.remove(r.Context(), id, version); err != nil {
			a.planeError(w, r, err, version != plane.AnyVersion)
			return
		}
		a.audit(r, ops.deleted, ops.kind, id, 0)
		w.WriteHeader(http.StatusNoContent)
	}
}

func (a PlaneAdmin) keys(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		a.listKeys(w, r)
		return
	}
	var s plane.Spec
	if e := Decode(w, r, a.MaxBody, &s); e != nil {
		WriteError(w, e)
		return
	}
	k, secret, err := a.Plane.CreateKey(r.Context(), s)
	if err != nil {
		a.planeError(w, r, err, false)
		return
	}
	b := keyOf(k)
	b.Secret = secret
	w.Header().Set("Location", "/v1/admin/keys/"+k.ID)
	a.written(w, r, http.StatusCreated, "create", "key", k.ID, k.Version, b)
}

// page reads the paging parameters: after (the last id of the previous
// page) and limit (1..1000, 100 by default).
func page(r *http.Request) (after string, limit int, e *Error) {
	q := r.URL.Query()
	limit = 100
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			return "", 0, BadRequest("limit", "want a whole number from 1 to 1000, got %q", s)
		}
		limit = n
	}
	return q.Get("after"), limit, nil
}

func (a PlaneAdmin) listKeys(w http.ResponseWriter, r *http.Request) {
	after, limit, e := page(r)
	if e != nil {
		WriteError(w, e)
		return
	}
	q := r.URL.Query()
	f := plane.Filter{Team: q.Get("team"), Plan: q.Get("plan")}
	if l := q.Get("label"); l != "" {
		name, value, ok := strings.Cut(l, "=")
		if !ok {
			WriteError(w, BadRequest("label", "want name=value, got %q", l))
			return
		}
		f.LabelName, f.LabelValue = name, value
	}
	if d := q.Get("disabled"); d != "" {
		v, err := strconv.ParseBool(d)
		if err != nil {
			WriteError(w, BadRequest("disabled", "want true or false, got %q", d))
			return
		}
		f.Disabled = &v
	}
	keys, next := a.Plane.ListKeys(f, after, limit)
	out := make([]keyBody, len(keys))
	for i, k := range keys {
		out[i] = keyOf(k)
	}
	WriteJSON(w, http.StatusOK, struct {
		Keys []keyBody `json:"keys"`
		Next string    `json:"next,omitempty"`
	}{out, next})
}

func (a PlaneAdmin) key(w http.ResponseWriter, r *http.Request) {
	serveRecord(a, w, r, recordOps[*plane.Key, keyBody]{
		kind: "key", deleted: "revoke",
		get: a.Plane.Key, update: a.Plane.UpdateKey, remove: a.Plane.DeleteKey,
		id: func(k *plane.Key) string { return k.ID }, version: func(k *plane.Key) int64 { return k.Version },
		body: keyOf,
	})
}

// rotateBody is the body of POST /v1/admin/keys/{id}/rotate.
type rotateBody struct {
	// Grace is how long the replaced secret stays valid: a Go duration
	// such as "1h"; none when absent.
	Grace string `json:"grace"`
}

func (a PlaneAdmin) rotate(w http.ResponseWriter, r *http.Request) {
	version, e := ifMatch(r)
	if e != nil {
		WriteError(w, e)
		return
	}
	var b rotateBody
	if e := DecodeOptional(w, r, a.MaxBody, &b); e != nil {
		WriteError(w, e)
		return
	}
	var grace time.Duration
	if b.Grace != "" {
		d, err := time.ParseDuration(b.Grace)
		if err != nil || d < 0 || d > 30*24*time.Hour {
			WriteError(w, BadRequest("grace", "want a duration from 0s to 720h such as 1h, got %q", b.Grace))
			return
		}
		grace = d
	}
	k, secret, err := a.Plane.RotateKey(r.Context(), r.PathValue("id"), grace, version)
	if err != nil {
		a.planeError(w, r, err, version != plane.AnyVersion)
		return
	}
	out := keyOf(k)
	out.Secret = secret
	a.written(w, r, http.StatusOK, "rotate", "key", k.ID, k.Version, out)
}

// usageBody is one limit of GET /v1/admin/keys/{id}/usage and
// /v1/admin/teams/{id}/usage.
type usageBody struct {
	Level     string    `json:"level"`
	LevelName string    `json:"level_name,omitempty"`
	Name      string    `json:"name"`
	Unit      string    `json:"unit,omitempty"`
	Limit     int64     `json:"limit"`
	Used      int64     `json:"used"`
	Remaining int64     `json:"remaining"`
	Reset     time.Time `json:"reset"`
}

// usage answers the usage of the key or team the path names, as of
// (service.Service.KeyUsage or TeamUsage).
func (a PlaneAdmin) usage(of func(ctx context.Context, id string) ([]service.Usage, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		us, err := of(r.Context(), r.PathValue("id"))
		if errors.Is(err, plane.ErrNotFound) {
			a.planeError(w, r, err, false)
			return
		}
		if err != nil {
			e, _ := ServiceError(err, true)
			WriteError(w, e)
			return
		}
		out := make([]usageBody, len(us))
		for i, u := range us {
			out[i] = usageBody{Level: u.Level.String(), LevelName: u.LevelName, Name: u.Name, Unit: u.Unit.String(),
				Limit: u.Limit, Used: u.Used, Remaining: u.Remaining, Reset: u.Reset.UTC()}
		}
		WriteJSON(w, http.StatusOK, struct {
			ID     string      `json:"id"`
			Limits []usageBody `json:"limits"`
		}{r.PathValue("id"), out})
	}
}
