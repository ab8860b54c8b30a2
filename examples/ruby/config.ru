# A Rack app served by puma under ck. puma takes the listening socket ck hands over (systemd
# socket activation: --bind-to-activated-sockets only) and runs in single mode (-w 0): ck runs
# one puma per slot. puma says nothing when it is ready; ck sees it accept, and --probe http
# makes its first passing HTTP probe count too:
#
#   ck run --port 8080 -w 2 --probe http -- \
#     puma --no-config --bind-to-activated-sockets only -w 0 -t 4:4 -e production examples/ruby/config.ru
#
# The app changes nothing for ck. GET / answers which worker served it (slot=S pid=P),
# GET /healthz answers ok.
slot = ENV.fetch("CK_SLOT", "-")

run lambda { |env|
  status, body =
    case env["PATH_INFO"]
    when "/" then [200, "slot=#{slot} pid=#{Process.pid}\n"]
    when "/healthz" then [200, "ok\n"]
    else [404, "not found\n"]
    end
  [status, { "Content-Type" => "text/plain", "Content-Length" => body.bytesize.to_s }, [body]]
}
