// A program built against an installed perserve (find_package): an actor
// adds 100 items, a learner samples them and checks every byte. Run beside
// the installed perserve-server --column id:int64 --column x:float32:2.
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include <perserve/client.h>

namespace {

int Fail(const char* what, const perserve::Status& status) {
  std::fprintf(stderr, "consumer: %s: %s\n", what, status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int code = 0;
  if (argc > 1 && std::strcmp(argv[1], "actor") == 0) {
    std::unique_ptr<perserve::ActorClient> actor;
    if (auto s = perserve::ActorClient::Join(MPI_COMM_WORLD, {}, &actor); !s.ok()) return Fail("join", s);
    std::vector<int64_t> ids(100);
    std::vector<float> x(200);
    for (int i = 0; i < 100; ++i) ids[i] = i, x[2 * i] = i * 0.5f, x[2 * i + 1] = -i * 0.5f;
    perserve::ColumnSpans batch{100, {std::as_bytes(std::span(ids)), std::as_bytes(std::span(x))}};
    if (auto s = actor->Add(batch); !s.ok()) return Fail("add", s);
    if (auto s = actor->Close(); !s.ok()) return Fail("close", s);
  } else {
    std::unique_ptr<perserve::LearnerClient> learner;
    if (auto s = perserve::LearnerClient::Join(MPI_COMM_WORLD, {}, &learner); !s.ok()) return Fail("join", s);
    perserve::SampleBatch batch;
    if (auto s = learner->Sample(32, 0.4, &batch); !s.ok()) return Fail("sample", s);
    for (int64_t i = 0; i < batch.size; ++i) {
      int64_t id;
      float x[2];
      std::memcpy(&id, batch.columns[0].data() + 8 * i, 8);
      std::memcpy(x, batch.columns[1].data() + 8 * i, 8);
      if (static_cast<uint64_t>(id) != batch.keys[i] || x[0] != id * 0.5f || x[1] != -id * 0.5f) code = 1;
    }
    if (auto s = learner->Close(); !s.ok()) return Fail("close", s);
    std::printf("consumer: learner sampled %lld items, %s\n", static_cast<long long>(batch.size),
                code == 0 ? "all as sent" : "SOME WRONG");
  }
  MPI_Finalize();
  return code;
}
