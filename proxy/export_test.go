package proxy

import "github.com/tokenlimit/tokenlimit/tokenizer"

// testTokens is shared by the package's tests: loading an encoding takes a
// fraction of a second and tens of MB.
var testTokens = counter{tokenizer.New()}

// TestTokenizer is the tokenizer the package's tests share, exported to the
// external test package.
var TestTokenizer = testTokens.Tokenizer
