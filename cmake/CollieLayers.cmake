# The layers of collie, bottom first: the one statement of the dependency
# order. Each line names a library target collie_<name> (alias collie::<name>),
# the folder that holds its sources, the layers it builds on directly (DEPS),
# and the variable that says whether this build has it (IF).
#
#  * the top-level CMakeLists.txt adds the layers' folders in this order,
#    those whose IF holds;
#  * collie_add_layer(<name> ...) in that folder links exactly these DEPS
#    (those that are built: cuda and nccl only with the toolkit);
#  * the layering test (test/build/check_layers.py, ctest "build: every
#    include points down the layers") reads this file and fails when a
#    source or header includes a header of a layer that is not below its own
#    (the transitive closure of DEPS).
#
# Folders that are no layer (samples/, bench/, test/, tools/) may include
# anything. A subfolder of a layer's folder (collectives/transport,
# rendezvous/tcp_store, the program rendezvous/collie_store) belongs to that
# layer.
collie_layer(base          base)
collie_layer(cuda          runtime/cuda          DEPS base IF COLLIE_HAVE_CUDA)
collie_layer(rendezvous    rendezvous            DEPS base)
collie_layer(launcher      runtime/launcher      DEPS rendezvous)
collie_layer(collectives   collectives           DEPS rendezvous)
collie_layer(process_group runtime/process_group DEPS rendezvous)
collie_layer(cpu           runtime/cpu           DEPS process_group collectives)
collie_layer(nccl          runtime/nccl          DEPS process_group cuda IF COLLIE_HAVE_NCCL)
collie_layer(api           runtime/api           DEPS cpu nccl)
collie_layer(nn            nn                    DEPS api IF COLLIE_BUILD_NN)
collie_layer(nn_cuda       nn/cuda               DEPS nn cuda)
collie_layer(torch         runtime/torch         DEPS api IF COLLIE_HAVE_TORCH)
