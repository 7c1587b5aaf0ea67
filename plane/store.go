package plane

import (
	"context"
	"errors"
	"fmt"
)

// AnyVersion, as a write's ifVersion, writes whatever version is stored.
const AnyVersion int64 = -1

// The stores' errors.
var (
	// ErrConflict: the stored version is not the one the write expected
	// (an If-Match that lost a race, or a create of an existing record).
	ErrConflict = errors.New("plane: the record changed or exists")
	// ErrNotFound: no such record.
	ErrNotFound = errors.New("plane: no such record")
	// ErrOutcomeUnknown: a write failed after it may have reached the
	// store (its reply was lost), and the store could not tell whether it
	// was applied. Reading the record tells.
	ErrOutcomeUnknown = errors.New("plane: the write may or may not have been applied")
)

// Store keeps the plane's records. Every write gets the next number of one
// sequence, the record's new version; a store is safe for concurrent use.
type Store interface {
	// Load returns every record and the sequence number of the last
	// write.
	Load(ctx context.Context) (records []Record, seq int64, err error)
	// Put writes data as the record kind/id if its stored version is
	// ifVersion (0: absent; AnyVersion: any), and returns its new
	// version; ErrConflict otherwise. It returns once the write is
	// durable. An error matching ErrOutcomeUnknown means the write may
	// have been applied; any other error means it was not.
	Put(ctx context.Context, kind Kind, id string, ifVersion int64, data []byte) (int64, error)
	// Delete removes kind/id if its stored version is ifVersion
	// (AnyVersion: any) and returns the deletion's version; ErrNotFound
	// if it is absent, ErrConflict if its version differs. Errors as for
	// Put.
	Delete(ctx context.Context, kind Kind, id string, ifVersion int64) (int64, error)
	// Watch calls apply with the writes made after seq, in order, as
	// they happen, until ctx ends (then it returns a nil error). A
	// deletion is a record without data. When the writes cannot be
	// followed (the log was trimmed past seq, or the store lost its data),
	// it calls apply with every record and full set: they replace all
	// records. It returns the sequence number it reached, to resume from
	// after an error. A store only one process writes (the embedded one)
	// never calls apply.
	Watch(ctx context.Context, seq int64, apply func(records []Record, full bool)) (int64, error)
}

// WriteError is a failed write of the record Kind/ID, so that a caller
// can name the record to read back when the write's outcome is unknown
// (Err matches ErrOutcomeUnknown).
type WriteError struct {
	Kind Kind
	ID   string
	Err  error
}

func (e *WriteError) Error() string {
	return fmt.Sprintf("plane: writing %s %s: %v", e.Kind, e.ID, e.Err)
}

func (e *WriteError) Unwrap() error { return e.Err }

// writeErr names the record of a failed store write; ErrConflict and
// ErrNotFound stay as they are.
func writeErr(kind Kind, id string, err error) error {
	if errors.Is(err, ErrConflict) || errors.Is(err, ErrNotFound) {
		return err
	}
	return &WriteError{Kind: kind, ID: id, Err: err}
}
