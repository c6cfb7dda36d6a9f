// hello.cpp: labios.h from C++ as it is (extern "C"), with RAII around the
// handle.
//
//   c++ -std=c++17 hello.cpp $(pkg-config --cflags --libs labios) -o hello
//   ./hello [ENDPOINT]        (default: LABIOS_ENDPOINT; credentials from
//                              LABIOS_KEY and LABIOS_SECRET)
#include <labios.h>

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

struct Error : std::runtime_error {
    int code;
    Error(const std::string &what, int rc)
        : std::runtime_error(what + ": " + labios_strerror(rc) + ": " +
                             labios_last_error()),
          code(rc) {}
};

void check(int rc, const std::string &what) {
    if (rc != LABIOS_OK)
        throw Error(what, rc);
}

struct Disconnect {
    void operator()(labios_t *h) const { labios_disconnect(h); }
};
using Handle = std::unique_ptr<labios_t, Disconnect>;

Handle connect(const char *endpoint) {
    labios_t *h = nullptr;
    check(labios_connect(endpoint, nullptr, nullptr, &h), "connect");
    return Handle(h);
}

} // namespace

int main(int argc, char **argv) {
    try {
        Handle h = connect(argc > 1 ? argv[1] : nullptr);
        const std::string path = "/hello/cpp-" + std::to_string(getpid()) + ".txt";
        const std::string text = "Hello from C++ through LABIOS labels!\n";

        check(labios_write(h.get(), path.c_str(), 0, text.data(), text.size()),
              path);
        std::vector<char> back(text.size() + 16);
        size_t n = 0;
        check(labios_read(h.get(), path.c_str(), 0, back.data(), back.size(), &n),
              path);
        std::string got(back.data(), n);
        if (got != text) {
            std::fprintf(stderr, "hello.cpp: read back \"%s\", wrote \"%s\"\n",
                         got.c_str(), text.c_str());
            return 1;
        }
        std::printf("hello.cpp: %zu bytes through %s: %s", n, path.c_str(),
                    got.c_str());
        check(labios_disconnect(h.release()), "disconnect");
        std::printf("hello.cpp: OK\n");
        return 0;
    } catch (const Error &e) {
        std::fprintf(stderr, "hello.cpp: %s\n", e.what());
        return 2;
    }
}
