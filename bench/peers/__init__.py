"""`tickwheel bench peers`: what users would pick instead, on tickwheel's hot second.

graphile-worker (Node) and River (Go) run the same test as `tickwheel bench hot-second`: N
no-op jobs due at one instant T0, two worker processes, the stack's Postgres. Their sources
are the folders beside this file; they are built in the user's cache on first use (npm, the
Go module proxy), so Node and Go are needed only when the command runs.
"""
