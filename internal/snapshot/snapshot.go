// Package snapshot keeps the embedded store's long budgets in a file, so
// that daily and monthly quotas and spend budgets survive a restart: Run
// writes the file every few seconds and once more when it stops (a
// graceful shutdown), Restore reads it back at start. A crash loses what
// was charged since the last write, at most one Interval.
//
// The file is written whole to a temporary file, fsynced, and renamed over
// the old one, so a reader sees the old file or the new one, never a mix.
// Its format is binary: a magic, a version, the budgets' count, each budget
// (key, algorithm, expiry, state as varints) and a CRC-32C of all that. A
// file that is corrupt, or of a newer version, is reported and ignored:
// the store starts empty, as without a file.
package snapshot

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/memstore"
)

// Defaults for Options' zero values.
const (
	// DefaultInterval is how often Run writes the file: the most a crash
	// loses.
	DefaultInterval = 5 * time.Second
	// DefaultMinLife: budgets live less than this after a write are left
	// out of it (a per-second or per-minute budget loses little by being
	// forgotten; calendar days and months, hours and spend budgets stay).
	DefaultMinLife = time.Minute
	// DefaultMaxBudgets bounds the file: at most this many budgets (each
	// at most tokenlimit.MaxKeyLength bytes of key and 41 of state).
	DefaultMaxBudgets = 200_000
)

// FileName is the file's name in the data directory.
const FileName = "budgets.snapshot"

// version is the format this package writes; it reads it and older ones.
const version = 1

var magic = []byte("TLBUDGET")

// Errors Read wraps.
var (
	// ErrCorrupt: the file is not a snapshot, is truncated, or its
	// checksum does not match.
	ErrCorrupt = errors.New("corrupt snapshot")
	// ErrNewer: the file was written by a newer tokenlimit.
	ErrNewer = errors.New("snapshot of a newer format")
)

// Options configures Run and Restore. Path is required.
type Options struct {
	// Path is the file's path.
	Path string
	// Interval is how often Run writes; zero means DefaultInterval.
	Interval time.Duration
	// MinLife: budgets that expire sooner after a write are left out;
	// zero means DefaultMinLife.
	MinLife time.Duration
	// MaxBudgets bounds the budgets in the file; zero means
	// DefaultMaxBudgets.
	MaxBudgets int
	// Now is the store's clock; nil means time.Now.
	Now func() time.Time
	// Logger reports what was restored and what failed; nil discards.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.MinLife <= 0 {
		o.MinLife = DefaultMinLife
	}
	if o.MaxBudgets <= 0 {
		o.MaxBudgets = DefaultMaxBudgets
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Restore loads the file at o.Path into st, if there is one. A file that
// cannot be read, is corrupt, or is of a newer format is logged and
// ignored (the store starts empty); so is a budget the store refuses.
func Restore(st *memstore.Store, o Options) {
	o = o.withDefaults()
	saved, err := Read(o.Path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return
	case err != nil:
		o.Logger.Error("budgets snapshot ignored: the store starts empty", "path", o.Path, "err", err)
		return
	}
	n, err := st.Import(o.Now(), saved)
	if err != nil {
		o.Logger.Error("budgets snapshot partly restored", "path", o.Path, "restored", n, "err", err)
		return
	}
	o.Logger.Info("budgets restored", "path", o.Path, "budgets", n, "expired", len(saved)-n)
}

// Run writes st's long budgets to o.Path every o.Interval until ctx ends,
// then once more, and returns. A failed write is logged and tried again
// at the next tick.
func Run(ctx context.Context, st *memstore.Store, o Options) {
	o = o.withDefaults()
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			save(st, o)
			return
		case <-tick.C:
			save(st, o)
		}
	}
}

func save(st *memstore.Store, o Options) {
	saved, dropped := st.Export(o.Now(), o.MinLife, o.MaxBudgets)
	if dropped > 0 {
		o.Logger.Warn("budgets snapshot full: budgets left out", "max", o.MaxBudgets, "left_out", dropped)
	}
	if err := Write(o.Path, saved); err != nil {
		o.Logger.Error("budgets snapshot not written", "path", o.Path, "err", err)
	}
}

// Write replaces the file at path with saved, atomically: a temporary
// file beside it, fsynced, renamed over it, and the directory fsynced.
func Write(path string, saved []memstore.Saved) error {
	buf := append([]byte{}, magic...)
	buf = binary.AppendUvarint(buf, version)
	buf = binary.AppendUvarint(buf, uint64(len(saved)))
	for _, b := range saved {
		buf = binary.AppendUvarint(buf, uint64(len(b.Key)))
		buf = append(buf, b.Key...)
		buf = binary.AppendUvarint(buf, uint64(b.Algorithm))
		buf = binary.AppendVarint(buf, b.Expires)
		for _, v := range b.State {
			buf = binary.AppendVarint(buf, v)
		}
	}
	buf = binary.BigEndian.AppendUint32(buf, crc32.Checksum(buf, castagnoli))
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	defer os.Remove(f.Name()) // after the rename, a no-op
	if _, err := f.Write(buf); err != nil {
		f.Close()
		return fmt.Errorf("snapshot: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("snapshot: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maxFileSize is the largest file Read accepts: DefaultMaxBudgets budgets
// of the longest key, with room for their varints.
const maxFileSize = DefaultMaxBudgets * (tokenlimit.MaxKeyLength + 64)

// Read returns the budgets in the file at path. It wraps os.ErrNotExist
// when there is none, ErrCorrupt or ErrNewer.
func Read(path string) ([]memstore.Saved, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	if fi.Size() > maxFileSize {
		return nil, fmt.Errorf("snapshot: %s: %d bytes, more than the %d a snapshot can hold: %w", path, fi.Size(), int64(maxFileSize), ErrCorrupt)
	}
	data := make([]byte, fi.Size())
	if _, err := f.ReadAt(data, 0); err != nil && fi.Size() > 0 {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	saved, err := decode(data)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %s: %w", path, err)
	}
	return saved, nil
}

// decode parses a whole file.
func decode(data []byte) ([]memstore.Saved, error) {
	if len(data) < len(magic)+4 || string(data[:len(magic)]) != string(magic) {
		return nil, fmt.Errorf("not a budgets snapshot: %w", ErrCorrupt)
	}
	r := reader{b: data[len(magic):]}
	if v := r.uvarint(); r.err == nil && v > version {
		return nil, fmt.Errorf("format version %d, this tokenlimit reads up to %d: %w", v, version, ErrNewer)
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, fmt.Errorf("checksum mismatch: %w", ErrCorrupt)
	}
	if len(r.b) < 4 {
		return nil, fmt.Errorf("truncated: %w", ErrCorrupt)
	}
	r.b = r.b[:len(r.b)-4]
	n := r.uvarint()
	if n > DefaultMaxBudgets {
		return nil, fmt.Errorf("%d budgets, more than %d: %w", n, DefaultMaxBudgets, ErrCorrupt)
	}
	saved := make([]memstore.Saved, 0, n)
	for range n {
		var b memstore.Saved
		b.Key = string(r.bytes(r.uvarint()))
		b.Algorithm = tokenlimit.Algorithm(r.uvarint())
		b.Expires = r.varint()
		for i := range b.State {
			b.State[i] = r.varint()
		}
		saved = append(saved, b)
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = errors.New("trailing bytes")
	}
	if r.err != nil {
		return nil, fmt.Errorf("%v: %w", r.err, ErrCorrupt)
	}
	return saved, nil
}

// reader reads varints from b; after the first failure it returns zeros
// and keeps err.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes(n uint64) []byte {
	if r.err != nil || n > uint64(len(r.b)) {
		r.fail()
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = errors.New("truncated")
	}
}
