package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// ErrNil is returned by [Server.Do] when Redis answers with a null bulk
// string or a null array, for example GET on a missing key. It lets a test
// tell "no value" apart from an empty string.
var ErrNil = errors.New("redistest: nil reply")

// ReplyError is an error reply sent by Redis, such as
// "NOSCRIPT No matching script" or "MOVED 3999 127.0.0.1:6381". Network and
// protocol failures are reported as other errors, so errors.As on a
// ReplyError says the server was reached and refused the command.
type ReplyError string

// Error returns the reply text as Redis sent it, without the leading '-'.
func (e ReplyError) Error() string { return string(e) }

// Timeouts of [Server.Do]. ioTimeout is generous so that a test may run
// DEBUG SLEEP or a slow script through Do.
const (
	dialTimeout = 5 * time.Second
	ioTimeout   = 60 * time.Second
)

// do sends one command to addr on a fresh connection and returns the reply
// formatted as described on [Server.Do].
func do(addr string, args ...string) (string, error) {
	if len(args) == 0 {
		return "", errors.New("redistest: Do needs a command")
	}
	conn, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(ioTimeout)); err != nil {
		return "", err
	}
	return roundTrip(conn, bufio.NewReader(conn), args...)
}

// roundTrip writes one command to w and reads its reply from r.
func roundTrip(w io.Writer, r *bufio.Reader, args ...string) (string, error) {
	if _, err := w.Write(encodeCommand(args)); err != nil {
		return "", err
	}
	return readReply(r)
}

// encodeCommand encodes args as a RESP array of bulk strings, the form every
// Redis command takes on the wire.
func encodeCommand(args []string) []byte {
	var b []byte
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, '\r', '\n')
		b = append(b, a...)
		b = append(b, '\r', '\n')
	}
	return b
}

// readReply reads one RESP2 reply. Simple strings, integers and bulk
// strings come back as their text; an error reply comes back as a
// [ReplyError]; a null comes back as [ErrNil]; an array comes back as its
// elements, each formatted the same way (nested arrays flattened, a null
// element as an empty line, an error element as its text), joined by "\n".
func readReply(r *bufio.Reader) (string, error) {
	line, err := readLine(r)
	if err != nil {
		return "", err
	}
	if line == "" {
		return "", errors.New("redistest: empty reply line")
	}
	kind, rest := line[0], line[1:]
	switch kind {
	case '+', ':':
		return rest, nil
	case '-':
		return "", ReplyError(rest)
	case '$':
		n, err := strconv.Atoi(rest)
		if err != nil {
			return "", fmt.Errorf("redistest: bad bulk length %q", rest)
		}
		if n < 0 {
			return "", ErrNil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return "", errors.New("redistest: bulk string not terminated by CRLF")
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(rest)
		if err != nil {
			return "", fmt.Errorf("redistest: bad array length %q", rest)
		}
		if n < 0 {
			return "", ErrNil
		}
		elems := make([]string, 0, n)
		for range n {
			s, err := readReply(r)
			var re ReplyError
			switch {
			case errors.Is(err, ErrNil):
				s = ""
			case errors.As(err, &re):
				s = re.Error()
			case err != nil:
				return "", err
			}
			elems = append(elems, s)
		}
		return strings.Join(elems, "\n"), nil
	default:
		return "", fmt.Errorf("redistest: unsupported reply type %q", kind)
	}
}

// readLine reads one CRLF-terminated line and returns it without the CRLF.
func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if !strings.HasSuffix(line, "\r\n") {
		return "", errors.New("redistest: reply line not terminated by CRLF")
	}
	return line[:len(line)-2], nil
}
