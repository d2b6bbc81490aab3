module sglmock

go 1.26
