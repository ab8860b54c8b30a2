module example.com/ck-go-example

go 1.19
