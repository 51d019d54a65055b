// The console's router: one page, hash routes (#/topics/NAME), one page shown at a time; a
// page returns how to stop its timers when another replaces it.

let leavePage: (() => void) | void = undefined;

function route(): void {
  if (leavePage) leavePage();
  leavePage = undefined;
  const root = document.getElementById("page");
  if (!root) return;
  const path = location.hash.replace(/^#\/?/, "").split("?")[0];
  const [section, ...rest] = path.split("/").map((p) => decodeURIComponent(p));
  const name = rest.join("/");
  for (const link of document.querySelectorAll("nav a")) {
    link.classList.toggle("active", link.getAttribute("data-section") === (section || "overview"));
  }
  try {
    switch (section) {
      case "":
      case "overview":
        leavePage = overviewPage(root);
        break;
      case "topics":
        leavePage = name ? topicDetailPage(root, name) : topicsPage(root);
        break;
      case "messages":
        messagesPage(root);
        break;
      case "routes":
        leavePage = routesPage(root);
        break;
      case "groups":
        leavePage = name ? groupDetailPage(root, name) : groupsPage(root);
        break;
      default:
        root.replaceChildren(h("h1", null, "Not found"), h("p", null, "No page at ", h("code", null, location.hash)));
    }
  } catch (e) {
    root.replaceChildren(errorBox(e));
  }
}

window.addEventListener("hashchange", route);
throughput.start();
route();
