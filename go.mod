module github.com/tokenlimit/tokenlimit

go 1.26
